# Shared by scripts/demo and scripts/test: create .venv if missing and install exactmem
# with the given extras; reinstall only when pyproject.toml changed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
extras="$1"
if [ ! -x "$venv/bin/python" ]; then
  echo "creating $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip >&2
fi
stamp="$venv/.exactmem-installed-$extras"
want="$(sha256sum "$root/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "installing exactmem[$extras] into $venv" >&2
  # torch is pinned (torch==2.13.0, the CPU build); an open range would pull a CUDA build
  spec="$root[$extras]"
  [ "$extras" = "base" ] && spec="$root"
  "$venv/bin/python" -m pip install --quiet -e "$spec" >&2
  echo "$want" > "$stamp"
fi
