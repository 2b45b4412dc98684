"""File writing: every file exactmem writes goes through :mod:`exactmem.files.atomic`."""
