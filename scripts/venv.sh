# Sourced by scripts/demo.sh and .ci/run: find or make the Python environment guardcache goes into,
# so neither command ever installs into the system's Python (PEP 668 refuses it on Debian and Ubuntu,
# and on a laptop it would change the user's own Python).
#
# After sourcing: PY is the environment's interpreter, PIP the pip command that installs into it,
# and install_guardcache EXTRAS [pip args...] installs this checkout with those extras.
#
#   $GUARDCACHE_VENV if set (made when missing);
#   else the environment you are in (an active venv or conda env);
#   else .venv in the checkout, made when missing (a read-only checkout gets one under
#   ${XDG_CACHE_HOME:-~/.cache}/guardcache/ instead).
#
# Needs a Python 3.11 or newer (python3, or python3.11/3.12/3.13 on PATH). Where the distribution keeps
# venv's pip apart (Debian's python3-venv), the environment is made without pip and the system's pip
# installs into it (pip --python), so no root is needed for that either.

set -euo pipefail

GUARDCACHE_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PIP_QUIET=(-q --disable-pip-version-check)

_say() { echo "--- $*"; }
_die() { echo "error: $*" >&2; exit 2; }

_python_ok() {  # a Python 3.11+ that can run
  "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

_find_python() {
  local candidate
  for candidate in python3 python3.11 python3.12 python3.13 python3.14 python; do
    if command -v "$candidate" >/dev/null 2>&1 && _python_ok "$candidate"; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

_checkout_writable() {
  local probe="$GUARDCACHE_ROOT/.write-probe.$$"
  if (: >"$probe") 2>/dev/null; then
    rm -f "$probe"
    return 0
  fi
  return 1
}

_in_an_environment() {  # the python3 on PATH is a venv's or an active conda env's
  [ -n "${VIRTUAL_ENV:-}" ] && return 0
  [ -n "${CONDA_PREFIX:-}" ] && [ "${CONDA_DEFAULT_ENV:-base}" != "base" ] && return 0
  "$1" -c 'import sys; sys.exit(sys.prefix == sys.base_prefix)' >/dev/null 2>&1
}

SYSTEM_PY="$(_find_python)" || _die "guardcache needs Python 3.11 or newer (python3 on PATH); none was found"

if [ -z "${GUARDCACHE_VENV:-}" ] && _in_an_environment "$SYSTEM_PY"; then
  PY="$SYSTEM_PY"
  PIP=("$PY" -m pip)
  _say "using the active environment ($("$PY" -c 'import sys; print(sys.prefix)'))"
else
  if [ -n "${GUARDCACHE_VENV:-}" ]; then
    VENV="$GUARDCACHE_VENV"
  elif _checkout_writable; then
    VENV="$GUARDCACHE_ROOT/.venv"
  else
    key="$(printf '%s' "$GUARDCACHE_ROOT" | cksum | cut -d' ' -f1)"
    VENV="${XDG_CACHE_HOME:-$HOME/.cache}/guardcache/venv-$key"
    echo "note: the checkout is read-only; the virtual environment goes to $VENV"
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    _say "creating the virtual environment $VENV"
    mkdir -p "$(dirname "$VENV")"
    if ! "$SYSTEM_PY" -m venv "$VENV" >/dev/null 2>&1; then
      rm -rf "$VENV"
      # Debian/Ubuntu without python3-venv: no ensurepip. An environment without pip still works, the
      # system's pip installs into it.
      "$SYSTEM_PY" -m venv --without-pip "$VENV" \
        || _die "cannot create a virtual environment at $VENV (python3 -m venv failed)"
    fi
  fi
  PY="$VENV/bin/python"
  if "$PY" -m pip --version >/dev/null 2>&1; then
    PIP=("$PY" -m pip)
  elif "$SYSTEM_PY" -m pip --version >/dev/null 2>&1; then
    PIP=("$SYSTEM_PY" -m pip --python "$PY")
  else
    _die "no pip to install into $VENV: install python3-pip and python3-venv (apt-get install python3-venv)"
  fi
  export VIRTUAL_ENV="$VENV"
  export PATH="$VENV/bin:$PATH"
fi

# install_guardcache EXTRAS [more pip arguments]: this checkout, editable where it can be written (a
# read-only one is installed from a copy: setuptools writes its build files into the source tree).
install_guardcache() {
  local extras="$1"
  shift
  if _checkout_writable; then
    "${PIP[@]}" install "${PIP_QUIET[@]}" -e "$GUARDCACHE_ROOT[$extras]" "$@"
  else
    local copy
    copy="$(mktemp -d)"
    tar -C "$GUARDCACHE_ROOT" --exclude=.git --exclude=.venv -cf - . | tar -C "$copy" -xf -
    "${PIP[@]}" install "${PIP_QUIET[@]}" "$copy[$extras]" "$@"
    rm -rf "$copy"
  fi
}
