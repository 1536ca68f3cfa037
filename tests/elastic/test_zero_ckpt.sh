#!/bin/sh
# test_zero_ckpt: ZeRO shards in checkpoints (todist/checkpoint.h,
# td_checkpoint_add_zero) through tests/elastic/zero_ck_peer under
# todist-run; every check of the peer compares with a reference it computes
# (plain Adam over a replica, whole-batch gradient):
#  - same world (2 ranks): 6 steps uninterrupted, and 3 + 3 with a save and
#    a fresh run that loads it: every loss equal bit for bit (%a), and the
#    loaded state equals the reference's;
#  - another world: saved at 4, loaded at 2; saved at 2, loaded at 3: each
#    rank's re-cut Adam state equals the reference's over its new shard,
#    and training goes on to the reference's parameters;
#  - a save removes the older saves' shard files (2 then 3 ranks on one
#    path: 3 files left);
#  - a missing shard file and a shard file of another save are refused,
#    naming the file and its rank; so is a checkpoint saved without ZeRO
#    shards when the run lists a ZeRO optimizer;
#  - ZC1 (runtime/elastic/ckzero.h), a save killed at each of its stages
#    (zero_ck_peer --die-at: SIGKILL on one rank at a rename, no timers)
#    over a save of step 2: part and shard (rank 1 just before / just after
#    its new shard is renamed in, before the outcomes' all_reduce), path
#    (rank 0 just before PATH is renamed in) and clean (rank 0 just after,
#    before the old set is removed). PATH must then name the old save
#    (part, shard, path) or the new one (clean) with that save's complete
#    set beside it, and a fresh run loads it: the state of that save's step,
#    equal to the reference's; its own save then removes every file the
#    other saves left: shard files, complete or .tmp, and PATH's .tmp.
. "$top_srcdir/tests/lib.sh"
plan 43
peer="$top_builddir/tests/elastic/zero_ck_peer"
run() { n=$1; shift; timeout -k 5 120 todist-run -n "$n" "$peer" "$@" 2>&1; }
passes() { printf '%s\n' "$1" | grep -c '^PASS'; }

# same world, bit for bit
out=$(run 2 --from 0 --to 6 --log "$TD_TMP/whole.log"); rc=$?
is "$rc $(passes "$out")" "0 1" "2 ranks, 6 steps uninterrupted"
[ "$rc" = 0 ] || diag "$out"
ck="$TD_TMP/ck.safetensors"
out1=$(run 2 --from 0 --to 3 --save "$ck" --log "$TD_TMP/cut.log"); rc1=$?
out2=$(run 2 --from 3 --to 6 --load "$ck" --log "$TD_TMP/cut.log"); rc2=$?
is "$rc1 $rc2" "0 0" "3 steps and a save, then a load and 3 more"
[ "$rc1$rc2" = 00 ] || diag "$out1" "$out2"
like "$out2" "PASS loaded_state" "the loaded shards equal the reference's state"
ok "$(cmp -s "$TD_TMP/whole.log" "$TD_TMP/cut.log"; echo $?)" \
   "every loss after the resume equals the uninterrupted run's, bit for bit"
cmp -s "$TD_TMP/whole.log" "$TD_TMP/cut.log" ||
    diag "$(paste "$TD_TMP/whole.log" "$TD_TMP/cut.log")"
is "$(ls "$TD_TMP" | grep -c '^ck\.safetensors\.zero-[01]-of-2\.[0-9a-f]\{16\}$')" \
   2 "one shard file per rank beside the checkpoint"

# another world size: 4 -> 2, 2 -> 3
ck4="$TD_TMP/ck4.safetensors"
out=$(run 4 --from 0 --to 3 --save "$ck4"); rc=$?
is "$rc" 0 "4 ranks save at step 3"
[ "$rc" = 0 ] || diag "$out"
out=$(run 2 --from 3 --to 6 --load "$ck4"); rc=$?
is "$rc $(passes "$out")" "0 2" \
   "4 -> 2: the re-cut state equals the reference's, training goes on to it"
[ "$rc" = 0 ] || diag "$out"
ck2="$TD_TMP/ck2.safetensors"
out=$(run 2 --from 0 --to 2 --save "$ck2"); rc=$?
out3=$(run 3 --from 2 --to 5 --load "$ck2"); rc3=$?
is "$rc $rc3 $(passes "$out3")" "0 0 2" \
   "2 -> 3: the re-cut state equals the reference's, training goes on to it"
[ "$rc$rc3" = 00 ] || diag "$out" "$out3"

# a new save at another world size on the same path removes the old set
cks="$TD_TMP/cks.safetensors"
out=$(run 2 --from 0 --to 1 --save "$cks"); rc=$?
out3=$(run 3 --from 0 --to 2 --save "$cks"); rc3=$?
is "$rc $rc3" "0 0" "2 ranks then 3 save to one path"
files=$(ls "$TD_TMP" | grep '^cks\.safetensors\.zero-')
is "$(printf '%s\n' "$files" | grep -c 'of-3\.')$(printf '%s\n' "$files" | grep -c 'of-2\.')" \
   "30" "the 3 new shard files remain, the 2 old ones are gone"
out=$(run 3 --from 2 --to 3 --load "$cks"); rc=$?
is "$rc $(passes "$out")" "0 2" "the last save loads"

# a missing shard file
shard1=$(ls "$ck2".zero-1-of-2.*)
mv "$shard1" "$TD_TMP/aside"
out=$(run 2 --from 2 --to 3 --load "$ck2"); rc=$?
is "$rc" 2 "a load without rank 1's shard file fails"
like "$out" "rank 1: load: .*shard file of rank 1 \\(of 2\\) is missing: $shard1" \
     "the error names the missing file and its rank"
is "$(printf '%s\n' "$out" | grep -c '^rank 0: load:')" 0 \
   "rank 0, whose shard is there, loads (and exits with the others)"

# a shard file of another save, put in its place
out=$(run 2 --from 0 --to 2 --save "$TD_TMP/other.safetensors"); rc=$?
is "$rc" 0 "another run saves the same steps"
cp "$TD_TMP"/other.safetensors.zero-1-of-2.* "$shard1"
out=$(run 2 --from 2 --to 3 --load "$ck2"); rc=$?
is "$rc" 2 "a load with another save's shard file fails"
like "$out" "rank 1: load: .*$shard1 \\(rank 1 of 2\\) holds save id [0-9a-f]*, but .* names save [0-9a-f]*: a shard of another save or run" \
     "the error names the file, its rank and the other save"

# a checkpoint without ZeRO shards, loaded by a run that lists one
out=$(run 2 --from 0 --to 1 --plain-save "$TD_TMP/plain.safetensors"); rc=$?
out=$(run 2 --from 1 --to 2 --load "$TD_TMP/plain.safetensors"); rc2=$?
is "$rc $rc2" "0 2" "a checkpoint saved without ZeRO shards is refused"
like "$out" "rank 0: load: .*plain.safetensors holds no ZeRO shards \\(saved without td_checkpoint_add_zero\\), but this run lists ZeRO optimizer 'zero'" \
     "the error names the file and the ZeRO item"

# ZC1: a save killed at each stage
save_id() {         # the zero_save_id PATH's metadata names
    head -c 4096 "$1" | grep -ao '"zero_save_id":"[0-9a-f]*"' |
        sed 's/.*:"\(.*\)"/\1/'
}
ids_of() {          # the save ids of PATH's shard files (or .tmp), unique
    ls "$TD_TMP" | sed -n "s/^$(basename "$1")\.zero-[0-9]*-of-[0-9]*\.\([0-9a-f]\{16\}\)\(\.tmp\.[0-9]*\.[0-9]*\)\{0,1\}\$/\1/p" |
        sort -u | tr '\n' ' '
}
files_of() {        # how many shard files of PATH hold save id ID
    ls "$TD_TMP" | grep -c "^$(basename "$1")\.zero-[0-9]*-of-2\.$2\$"
}
for stage in part shard path clean; do
    case $stage in
    part|shard) victim=1 want=old ;;
    *)     victim=0 want=old ;;
    esac
    [ "$stage" = clean ] && want=new
    ckd="$TD_TMP/die-$stage.safetensors"
    run 2 --from 0 --to 2 --save "$ckd" >/dev/null
    old=$(save_id "$ckd")
    out=$(run 2 --from 2 --to 4 --load "$ckd" --save "$ckd" --die-at "$stage")
    rc=$?
    new=$(ids_of "$ckd" | tr ' ' '\n' | grep -v "^$old\$" | grep . | head -n 1)
    is "$rc $(printf '%s\n' "$out" |
              grep -c "rank $victim (pid [0-9]*) was killed by signal 9")" \
       "137 1" "$stage: the save at step 4 killed at its stage (rank $victim)"
    [ "$rc" = 137 ] || diag "$out"
    named=$(save_id "$ckd")
    if [ "$named" = "$old" ]; then got=old; elif [ -n "$named" ] &&
        [ "$named" = "$new" ]; then got=new; else got="neither ($named)"; fi
    is "$got" "$want" "$stage: PATH names the $want save"
    # PATH's set is complete whichever it names; the other save's files
    # (the killed one's new shards, or the old set) are still there
    left=$(ids_of "$ckd" | tr ' ' '\n' | grep -v "^$named\$" | grep -c .)
    tmps=$(ls "$TD_TMP" | grep -c "^$(basename "$ckd")\..*tmp\.")
    is "$(files_of "$ckd" "$named") $left" "2 1" \
       "$stage: PATH's set is complete, the other save's files are left over"
    step=2
    [ "$got" = new ] && step=4
    out=$(run 2 --from $step --to 5 --load "$ckd" --save "$ckd"); rc=$?
    is "$rc $(passes "$out")" "0 2" \
       "$stage: a fresh run loads PATH: the reference's state at step $step"
    [ "$rc" = 0 ] || diag "$out"
    last=$(save_id "$ckd")
    is "$(ids_of "$ckd")$(files_of "$ckd" "$last")" "$last 2" \
       "$stage: its save removes the other saves' shard files"
    # part leaves rank 1's shard .tmp, path PATH's .tmp (the others may
    # leave one where todist-run stopped a rank mid-write)
    had=- want_had=-
    case $stage in part|path) want_had=left had=none
                              [ "$tmps" -gt 0 ] && had=left ;; esac
    is "$had $(ls "$TD_TMP" | grep -c "^$(basename "$ckd")\..*tmp\.")" \
       "$want_had 0" "$stage: and every .tmp file a killed save left"
done
done_testing
