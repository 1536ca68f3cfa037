#!/bin/sh
# doc_tree.sh TREE BLOCKS CC-FLAGS...: the working copy the docs' commands
# run in (tests/docs/test_docs_commands.sh, tests/spank/test_spank_slurm.sh):
# TREE holds a link to every entry of the source tree ($top_srcdir), build/
# links to the build ($top_builddir), the files the pages define (blocks
# marked "file NAME" in BLOCKS, from doc_blocks.sh), and ./train and
# ./evaluate, the user's programs the pages name, and ./hello: the README's hello.c
# built with `cc hello.c CC-FLAGS...`. Fails when hello.c does not build.
set -e
tree=$1 blocks=$2
shift 2
mkdir -p "$tree"
for e in "$top_srcdir"/* "$top_srcdir"/.[!.]*; do
    [ -e "$e" ] || continue
    case ${e##*/} in build|.git) continue ;; esac
    ln -s "$e" "$tree/${e##*/}"
done
ln -s "$top_builddir" "$tree/build"
tab=$(printf '\t')
awk -F '\t' '$2 == "file" { print $1 "\t" $5 }' "$blocks/index" |
while IFS="$tab" read -r id name; do
    cp "$blocks/$id.body" "$tree/$name"
done
cd "$tree"
[ -f hello.c ] || { echo "doc_tree.sh: the pages define no hello.c" >&2; exit 1; }
cc hello.c -o train "$@"
cp train evaluate
cp train hello
