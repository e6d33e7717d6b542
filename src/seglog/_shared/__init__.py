"""What several writer processes of one log share, and one writer's way through it.
``writers`` owns the mapped ``.writers`` header (the only code that reads or writes its
words), the list of segments as the header says, and the repair of what a writer that
died holding the lock left; ``mode`` is one writer's way into a change (this process's
lock, then the others') and out of it (publishing what moved)."""
