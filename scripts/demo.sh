#!/bin/sh
# The main job: install dependencies, build, and run the demo on 4 local
# workers.
set -e
top=$(cd "$(dirname "$0")/.." && pwd)
sh "$top/scripts/install-deps.sh"
sh "$top/scripts/build.sh"
cd "$top/build"
exec ./tools/todist-run -n 4 --label ./tools/todist-info
