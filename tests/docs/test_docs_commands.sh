#!/bin/sh
# Every command the README and docs/ show works as written: each sh block
# runs as one `sh -e` script, as a user would paste it, from the top of a
# copy of the source tree (its build/ is this build), with todist installed
# by `make install DESTDIR=...` on PATH and pkg-config's path. Blocks
# marked <!-- doc-test: torch|gpu|slurm|skip ... --> run only where that
# exists (slurm ones in tests/spank/test_spank_slurm.sh); docs/building.md says
# how to mark one.
. "$top_srcdir/tests/lib.sh"
td_sanitized && skip_all "$TD_SANITIZED_WHY"
S=$top_srcdir
B=$top_builddir
command -v pkg-config >/dev/null || skip_all "pkg-config not found"

blocks=$TD_TMP/blocks
# shellcheck disable=SC2046
(cd "$S" && sh tests/docs/doc_blocks.sh "$blocks" README.md $(ls docs/*.md)) ||
    { plan 1; ok 1 "split the pages into blocks"; done_testing; }
cmds=$(awk -F '\t' '$2 != "code" && $2 != "file"' "$blocks/index" | wc -l)
plan $((cmds + 4))

# 1. A block marked with an unknown kind is a typo that would hide it.
bad=$(awk -F '\t' '$2 !~ /^(run|file|torch|gpu|slurm|skip|code)$/ { print $4 ": " $2 }' "$blocks/index")
is "$bad" "" "every doc-test marker is one of file, torch, gpu, slurm, skip"

# 2. Install as a user would, into a scratch root.
D=$TD_TMP/root
${TD_MAKE:-make} -C "$B" install DESTDIR="$D" >"$TD_TMP/install.log" 2>&1
rc=$?
is "$rc" 0 "make install DESTDIR (for the commands)"
[ $rc = 0 ] || diag "$(tail -20 "$TD_TMP/install.log")"
mk() { sed -n "s|^$1 = ||p" "$B/Makefile" | head -1; }
prefix=$(mk prefix)
export PATH="$D$prefix/bin:/usr/bin:$PATH"
export PKG_CONFIG_PATH="$D$prefix/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D"
export LD_LIBRARY_PATH="$D$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export MANPATH="$D$prefix/share/man:"
# The manual pages the docs name are installed where man finds them.
missing=
pages=$(awk '$1 == "dist_man_MANS" && $2 == "=" { on = 1; $1 = ""; $2 = "" }
             on { c = sub(/\\$/, ""); print; if (!c) exit }' "$B/Makefile")
for m in $pages; do
    m=$(basename "$m"); m=${m%.[0-9]}
    man -w "$m" 2>/dev/null | grep "^$D" >/dev/null || missing="$missing $m"
done
[ -n "$pages" ] || missing="(no dist_man_MANS in the Makefile)"
command -v man >/dev/null || missing="(man not installed: Debian package man-db)"
is "$missing" "" "make install puts every manual page where man finds it"
export OPENBLAS_NUM_THREADS=1

# The working copy: the source tree's entries, build/ the build, the files
# the pages define, ./train and ./evaluate (the README's hello.c, built
# against the installed library as the README says).
W=$TD_TMP/tree
built=1
sh "$S/tests/docs/doc_tree.sh" "$W" "$blocks" $(pkg-config --cflags --libs todist) \
    >"$TD_TMP/cc.log" 2>&1 || built=0
is "$built" 1 "the README's hello.c builds against the installed library as train and evaluate"
[ $built = 1 ] || diag "$(cat "$TD_TMP/cc.log")"

have_torch=0
/usr/bin/python3 -c 'import torch' >/dev/null 2>&1 && have_torch=1
have_gpu=0
nvidia-smi -L 2>/dev/null | grep '^GPU' >/dev/null && have_gpu=1

# 3... One test per command block.
while IFS="$(printf '\t')" read -r id kind lang where rest; do
    case $kind in code|file) continue ;; esac
    case $kind in
    skip)  skip 1 "$where: not run: $rest"; continue ;;
    slurm) skip 1 "$where: needs a Slurm cluster (tests/spank/test_spank_slurm.sh runs it)"; continue ;;
    torch) [ $have_torch = 1 ] || { skip 1 "$where: needs PyTorch (python3-torch)"; continue; } ;;
    gpu)   [ $have_gpu = 1 ] || { skip 1 "$where: needs a CUDA device"; continue; } ;;
    esac
    (cd "$W" && timeout 600 sh -e "$blocks/$id.body") >"$TD_TMP/$id.out" 2>&1 </dev/null
    rc=$?
    is "$rc" 0 "$where runs as written: $(head -1 "$blocks/$id.body" | cut -c1-60)"
    [ $rc = 0 ] || diag "$(tail -15 "$TD_TMP/$id.out")"
done < "$blocks/index"
# What the commands wrote into the build (c-api.md's checkpoint).
rm -f "$B/mlp.safetensors"
done_testing
