# Shared by scripts/demo and scripts/test: create .venv if missing and install exactmem with
# the given extras, every package pinned by constraints.txt (the lock file CI tests with).
# Reinstalls when pyproject.toml or constraints.txt changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
extras="$1"
constraints="$root/constraints.txt"
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
fi
stamp="$venv/.exactmem-installed-$extras"
want="$(cat "$root/pyproject.toml" "$root/setup.py" "$constraints" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing exactmem[$extras] into $venv (pinned by constraints.txt)" >&2
  spec="$root[$extras]"
  [ "$extras" = "base" ] && spec="$root"
  # torch is pinned to 2.13.0, the CPU build; an unpinned torch would pull a CUDA build
  "$venv/bin/python" -m pip install --quiet --constraint "$constraints" -e "$spec" >&2
  echo "$want" > "$stamp"
fi
