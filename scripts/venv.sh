# Sourced by scripts/demo, scripts/test and scripts/bench: make .venv with seglog and
# the extras in $SEGLOG_EXTRAS (unset: "dev"; empty: none, the runtime alone).
# Re-installs when pyproject.toml changes. Needs python3 >= 3.11 on PATH (or $PYTHON).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PYTHON:-python3}"
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "seglog needs Python >= 3.11; set PYTHON=/path/to/python3.11+" >&2
  exit 1
fi
extras="${SEGLOG_EXTRAS-dev}"
stamp="$root/.venv/.seglog-installed-${extras:-runtime}"
stamp="${stamp//,/-}"
if [ ! -x "$root/.venv/bin/python" ] || [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  "$py" -m venv "$root/.venv"
  "$root/.venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    -e "$root${extras:+[$extras]}"
  touch "$stamp"
fi
VENV_PY="$root/.venv/bin/python"
