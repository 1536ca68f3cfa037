#!/bin/sh
# todist-run runs Python as torchrun does: `todist-run train.py ARGS` runs
# `$PYTHON train.py ARGS` (PYTHON unset: python3 on PATH), `-m MODULE`
# runs a module, `--no-python` runs the program as given; other programs
# still run as given. Needs only a python3.
. "$top_srcdir/tests/lib.sh"
PY=${TD_PYTHON:-$(command -v python3)}
[ -n "$PY" ] && [ -x "$PY" ] || skip_all "no python3"
plan 8
cd "$TD_TMP" || exit 1
cat > train.py <<'PYEOF'
import os, sys
# one write per line: the ranks share the terminal
os.write(1, ("script rank=%s argv=%s exe=%s\n" % (
    os.environ["RANK"], sys.argv[1:],
    os.path.basename(sys.executable))).encode())
PYEOF
mkdir -p pkg && cp train.py pkg/train.py && : > pkg/__init__.py

out=$(PYTHON=$PY timeout 60 todist-run -n 2 train.py a --b 2>&1 | sort)
is "$out" "script rank=0 argv=['a', '--b'] exe=$(basename "$PY")
script rank=1 argv=['a', '--b'] exe=$(basename "$PY")" \
   "todist-run -n 2 train.py a --b runs \$PYTHON train.py a --b on each rank"

out=$(PYTHON=$PY timeout 60 todist-run -n 2 -m pkg.train x 2>&1 | sort)
is "$out" "script rank=0 argv=['x'] exe=$(basename "$PY")
script rank=1 argv=['x'] exe=$(basename "$PY")" \
   "todist-run -m pkg.train x runs the module on each rank"

out=$(PYTHON=$PY timeout 60 todist-run --module pkg.train 2>&1)
like "$out" "^script rank=0 argv=\[\]" "--module is -m"

# PYTHON unset: python3 from PATH (here a stand-in that says so)
mkdir bin && printf '#!/bin/sh\necho "stand-in python3 $*"\n' > bin/python3 &&
    chmod +x bin/python3
out=$(env -u PYTHON PATH="$TD_TMP/bin:$PATH" timeout 60 todist-run train.py z 2>&1)
is "$out" "stand-in python3 train.py z" "PYTHON unset: python3 on PATH"
out=$(PYTHON= PATH="$TD_TMP/bin:$PATH" timeout 60 todist-run -m pkg.train 2>&1)
is "$out" "stand-in python3 -m pkg.train" "PYTHON empty: python3 on PATH, with -m"

# --no-python: the .py file itself is the program (here an executable one)
printf '#!/bin/sh\necho "ran as given $*"\n' > direct.py && chmod +x direct.py
out=$(PYTHON=$PY timeout 60 todist-run --no-python ./direct.py q 2>&1)
is "$out" "ran as given q" "--no-python runs PROGRAM.py as given"
out=$(timeout 60 todist-run -m --no-python x 2>&1); rc=$?
is "$rc" 2 "-m with --no-python is refused (exit 2)"
out=$(PYTHON=/nonexistent timeout 60 todist-run sh -c 'echo plain' 2>&1)
is "$out" "plain" "a program not ending in .py runs as given"
done_testing
