"""Render every notebook view and every reading command to PNG in headless Chromium,
for the docs (run by scripts/screenshots, which installs Chromium if it is missing).

    python scripts/screenshots.py [OUT_DIR]        (default docs/img)

The data is a day of it (tests/day.py): a 6-partition topic of JSON orders with keys
and headers (lz4), a plain access log, a compacted log, a damaged log, and two consumer
groups, one with a live member and one whose member was killed. Notebook views are
shown inside a page that applies rules like JupyterLab's to its outputs (every cell
right-aligned, tables centred, striped rows), as a notebook would show them; the
commands' output as an 80-column terminal shows it (run in the data's directory).
The temporary directory's path is shown as /srv. Each page is cropped to its
content (Pillow, which the dev extra brings with matplotlib).
"""

from __future__ import annotations

import html
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import day  # noqa: E402  (tests/day.py: the data)

import seglog  # noqa: E402

# rules like JupyterLab's own for rendered HTML outputs (written here, not copied):
# what a view's table meets in a notebook
JUPYTERLAB_LIKE = """
body { font-family: system-ui, sans-serif; font-size: 13px; color: #212121;
       background: #fff; margin: 0; padding: 12px 16px; }
.jp-OutputArea-output { padding: 4px 0; }
.jp-RenderedHTMLCommon table { border-collapse: collapse; border-spacing: 0; border: none;
  font-size: 12px; table-layout: fixed; margin-left: auto; margin-right: auto; }
.jp-RenderedHTMLCommon thead { border-bottom: 1px solid #000; vertical-align: bottom; }
.jp-RenderedHTMLCommon td, .jp-RenderedHTMLCommon th, .jp-RenderedHTMLCommon tr {
  text-align: right; vertical-align: middle; padding: 0.5em; line-height: normal;
  white-space: normal; max-width: none; border: none; }
.jp-RenderedHTMLCommon th { font-weight: bold; }
.jp-RenderedHTMLCommon tbody tr:nth-child(odd) { background: #f5f5f5; }
.jp-RenderedHTMLCommon tbody tr:hover { background: rgba(66, 165, 245, 0.2); }
.prompt { color: #303f9f; font-family: monospace; font-size: 12px; margin: 4px 0; }
"""
TERMINAL = """
body { margin: 0; padding: 0; background: #fff; }
pre { display: inline-block; margin: 0; padding: 12px 14px; background: #1e1e1e;
      width: 80ch; white-space: pre-wrap; overflow-wrap: anywhere;
      color: #e6e6e6; font: 13px/1.35 'DejaVu Sans Mono', monospace; }
.cmd { color: #8ae234; }
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("no Chromium: scripts/screenshots installs Debian's chromium")


def shoot(page: str, png: str, tmp: str, width: int) -> None:
    """``page`` (HTML) to ``png``, ``width`` CSS pixels wide, cropped to its content."""
    src = os.path.join(tmp, os.path.basename(png)[:-4] + ".html")
    with open(src, "w") as f:
        f.write(page)
    profile = tempfile.mkdtemp(dir=tmp)
    subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-quic", "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync", "--hide-scrollbars",
                    f"--user-data-dir={profile}", "--force-device-scale-factor=1",
                    f"--window-size={width},4000", f"--screenshot={png}",
                    "file://" + src], check=True, capture_output=True, timeout=120)
    crop(png)


def crop(png: str) -> None:
    """Cut the page's empty bottom (and right) off, keeping a margin."""
    from PIL import Image, ImageChops
    with Image.open(png) as im:
        rgb = im.convert("RGB")
    bg = Image.new("RGB", rgb.size, rgb.getpixel((rgb.width - 1, rgb.height - 1)))
    box = ImageChops.difference(rgb, bg).getbbox()
    if box is not None:
        rgb = rgb.crop((0, 0, min(rgb.width, box[2] + 16), min(rgb.height, box[3] + 14)))
    rgb.convert("P", palette=Image.Palette.ADAPTIVE, colors=128).save(png, optimize=True)


def notebook_page(cells: list[tuple[str, str]]) -> str:
    """Cells of (the code, its HTML output), as JupyterLab lays them out."""
    body = "".join(
        f"<div class='prompt'>In: {html.escape(code)}</div>"
        f"<div class='jp-OutputArea-output jp-RenderedHTMLCommon'>{out}</div>"
        for code, out in cells)
    return f"<html><head><style>{JUPYTERLAB_LIKE}</style></head><body>{body}</body></html>"


def terminal_page(runs: list[tuple[str, str]]) -> str:
    body = "\n".join(f"<span class='cmd'>$ {html.escape(cmd)}</span>\n{html.escape(out)}"
                     for cmd, out in runs)
    return f"<html><head><style>{TERMINAL}</style></head><body><pre>{body}</pre></body></html>"


def cli(root: str, *args: str) -> str:
    p = subprocess.run([sys.executable, "-m", "seglog", *args], capture_output=True,
                       text=True, cwd=root, timeout=300)
    return (p.stdout + p.stderr).rstrip("\n")


def main() -> None:
    out_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                              os.path.join(HERE, "..", "docs", "img"))
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="seglog-shots-") as tmp:
        root = os.path.join(tmp, "data")
        d = day.build(root, live=True)
        try:
            pages = views(root) + commands(root) + example_notebook()
            for name, page, width in pages:
                # the views show absolute paths: the temporary directory's name is
                # this machine's, not the reader's
                page = page.replace(tmp, "/srv")
                png = os.path.join(out_dir, name)
                shoot(page, png, tmp, width)
                print(f"{png}: {os.path.getsize(png):,} bytes")
        finally:
            d.close()


def views(root: str) -> list[tuple[str, str, int]]:
    out = []
    with seglog.Log.open(os.path.join(root, "orders-3"), readonly=True) as log:
        out.append(("notebook-log.png", notebook_page([
            ('seglog.Log.open("data/orders-3", readonly=True)', log._repr_html_())]), 1100))
        out.append(("notebook-messages.png", notebook_page([
            ("log.read(6000, max_bytes=2048)", log.read(6000, max_bytes=2048)._repr_html_())]),
            1100))
        out.append(("notebook-stats.png", notebook_page([
            ("log.stats()", log.stats()._repr_html_()),
            ("log.metrics()", log.metrics()._repr_html_())]), 700))
    with seglog.Log.open(os.path.join(root, "clicks"), readonly=True) as log:
        rep = log.verify()
        out.append(("notebook-verify.png", notebook_page([
            ("clicks = seglog.Log.open(\"data/clicks\", readonly=True); clicks.verify()",
             rep._repr_html_()),
            ("clicks", log._repr_html_())]), 1100))
    with seglog.Topic.open(root, "orders", readonly=True) as topic:
        before = topic._repr_html_()
        topic.verify()
        out.append(("notebook-topic.png", notebook_page([
            ('topic = seglog.Topic.open("data", "orders", readonly=True); topic', before),
            ("topic.verify(); topic", topic._repr_html_())]), 1100))
        out.append(("notebook-metrics.png", notebook_page([
            ("topic.metrics()", topic.metrics()._repr_html_())]), 900))
    out.append(("notebook-groups.png", notebook_page([
        ('seglog.describe_group("data", "billing")',
         seglog.describe_group(root, "billing")._repr_html_()),
        ('seglog.describe_group("data", "audit")',
         seglog.describe_group(root, "audit")._repr_html_())]), 1100))
    return out


def example_notebook() -> list[tuple[str, str, int]]:
    """examples/inspect_log.ipynb run (nbclient), its chart cell and the cells after
    the first view, as they come out."""
    import base64

    import nbclient
    import nbformat
    nb = nbformat.read(os.path.join(HERE, "..", "examples", "inspect_log.ipynb"), as_version=4)
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3").execute()
    cells = []
    for c in nb.cells:
        if c.cell_type != "code" or not any(k in c.source for k in ("per_minute", "verify")):
            continue
        outs = []
        for o in c.outputs:
            data = o.get("data", {})
            if "text/html" in data:
                outs.append(data["text/html"])
            elif "image/png" in data:
                raw = base64.b64decode(data["image/png"])
                outs.append("<img src='data:image/png;base64,"
                            + base64.b64encode(raw).decode() + "'>")
            elif "text/plain" in data or o.output_type == "stream":
                outs.append(f"<pre>{html.escape(data.get('text/plain') or o.text)}</pre>")
        cells.append((c.source.splitlines()[-1] if "verify" in c.source else
                       "per_minute.plot(...)  # examples/inspect_log.ipynb", "".join(outs)))
    return [("notebook-example.png", notebook_page(cells), 1000)]


def commands(root: str) -> list[tuple[str, str, int]]:
    def runs(*cmds: tuple[str, ...]) -> list[tuple[str, str]]:
        return [("seglog " + " ".join(c), cli(root, *c)) for c in cmds]
    return [
        ("cli-verify.png", terminal_page(runs(("verify", "."))), 760),
        ("cli-stats.png", terminal_page(runs(("stats", "."))), 760),
        ("cli-groups.png", terminal_page(runs(("groups", "."), ("groups", ".", "audit"))), 760),
        ("cli-dump-tail.png", terminal_page(runs(
            ("dump", "orders-3", "--from", "6000", "--to", "6002", "--print-data"),
            ("tail", ".", "orders", "-n", "1"))), 760),
        ("cli-recover.png", terminal_page(runs(("recover", "clicks"),)), 760),
    ]


if __name__ == "__main__":
    main()
