#!/bin/sh
# test_maml_sine: MAML on sinusoids with the inner loops on the workers.
# With the same --seed, 1 worker and 4 workers print the same meta-loss at
# every logged iteration (to 1e-5), in the documented format, and the
# meta-loss falls (mean of the last five logged values below the mean of
# the first five).
. "$top_srcdir/tests/lib.sh"
plan 6
ex="$top_builddir/examples/maml_sine"
opts="--seed 3 --iterations 300 --log-every 10"
out1=$(timeout -k 5 300 todist-run -n 1 "$ex" $opts 2>&1); rc1=$?
out4=$(timeout -k 5 300 todist-run -n 4 "$ex" $opts 2>&1); rc4=$?
is "$rc1" 0 "1 worker: exits 0"
is "$rc4" 0 "4 workers: every rank exits 0"
like "$out4" '^iter=300 meta_loss=[0-9]+\.[0-9]{6}$' "line format"
n=$(printf '%s\n' "$out4" | grep -c '^iter=')
is "$n" 30 "30 logged iterations"
same=$(printf '%s\n%s\n' "$out1" "$out4" | awk -F'[= ]' '
    /^iter=/ { if ($2 in v) { d = v[$2] - $4; if (d < 0) d = -d;
                              if (d > 1e-5) bad++; n++ }
               else v[$2] = $4 }
    END { exit !(n == 30 && bad == 0) }'; echo $?)
ok "$same" "1 and 4 workers: the same meta-loss at every logged iteration"
falls=$(printf '%s\n' "$out4" | awk -F'[= ]' '/^iter=/ { v[++n] = $4 }
    END { for (i = 1; i <= 5; i++) { a += v[i]; b += v[n - 5 + i] }
          exit !(n >= 10 && b < a) }'; echo $?)
ok "$falls" "the meta-loss falls"
[ "$rc1$rc4" = 00 ] || diag "$out1" "$out4"
done_testing
