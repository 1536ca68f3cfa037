# Sourced by the torch tests after tests/lib.sh: skips under a sanitizer
# (torch is not built with one) and where no Python imports a working
# torch.distributed; sets PY (TD_PYTHON, else /usr/bin/python3) and the
# environment a rank needs to load this tree's package and library.
td_sanitized && skip_all "$TD_SANITIZED_WHY"
PY=${TD_PYTHON:-/usr/bin/python3}
[ -x /usr/bin/python3 ] && ! "$PY" -c 'import torch' 2>/dev/null && PY=/usr/bin/python3
"$PY" -c 'import torch.distributed as d; assert d.is_available()' 2>/dev/null ||
    skip_all "torch.distributed not importable by $PY"
export PYTHONPATH="$top_srcdir/python${PYTHONPATH:+:$PYTHONPATH}"
export TODIST_LIBRARY="$top_builddir/.libs/libtodist.so.0"
export OMP_NUM_THREADS=1 TODIST_COLL_TIMEOUT=30
