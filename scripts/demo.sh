#!/usr/bin/env bash
# The README's first command: install guardcache with its server extra into the project's virtual
# environment (scripts/venv.sh: the active one, else .venv, made when missing) and run the demo on
# built-in defaults: no keys, no GPU, no root. Arguments go to `guardcache demo` (try --help).
set -euo pipefail
source "$(dirname "$0")/venv.sh"

_say "installing guardcache with the server extra"
install_guardcache server
_say "guardcache demo $*"
exec "$PY" -m guardcache demo "$@"
