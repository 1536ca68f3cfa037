# rounds.awk: the close of bench/hosts.sh ROUNDS=N. Input: the ratio lines
# of every round ("allreduce round=R [build=B] shape=S hosts=L size=Z
# key=value ..."); output: one "median" line per cell, in the order the
# cells first came. Figures (*_us): their median over the rounds. Ratios:
# the median of the rounds' ratios, [least-most], and where there are 6
# rounds or more ",ci95:a-b", a distribution-free 95% interval for that
# median: the order statistics n/2 - 0.98 sqrt(n) and n/2 + 1 + 0.98 sqrt(n)
# of the sorted ratios (the binomial's normal approximation; 16 rounds:
# the 4th and 13th). A verdict against Open MPI needs it: on the emulated
# bed a single round's ratio of a small cell spreads 0.6-1.5, so a median
# of 16 rounds at 0.92 may not be below 1. Where the cell has
# bestmpi/todist, "todist=" says where the interval lies: faster (above 1),
# slower (below 1) or tie (it holds 1); with fewer than 6 rounds, "todist="
# is not given.
function field(line, key,   n, a, i) { n = split(line, a, " ");
    for (i = 1; i <= n; i++) if (index(a[i], key "=") == 1) return substr(a[i], length(key) + 2);
    return "" }
# sorted(list, s): the numbers of LIST (space separated) into s[1..n], ascending; returns n
function sorted(list, s,   n, i, j, t) { n = split(list, s, " ");
    for (i = 2; i <= n; i++) { t = s[i] + 0; for (j = i - 1; j >= 1 && s[j] + 0 > t; j--) s[j + 1] = s[j]; s[j + 1] = t }
    return n }
function med(s, n) { return n % 2 ? s[(n + 1) / 2] : (s[n / 2] + s[n / 2 + 1]) / 2 }
{ k = field($0, "build") "|" field($0, "shape") "|" field($0, "hosts") "|" field($0, "size");
  if (!(k in seen)) { seen[k] = 1; keys[++nk] = k }
  nf = split("todist_us tcp_us ucx_us flat_us busy_us bestmpi/todist bestmpi/todist(mean) auto/flat default/busy of_ucx", f, " ");
  for (i = 1; i <= nf; i++) { x = field($0, f[i]); sub(/%$/, "", x); if (x != "") l[k, f[i]] = l[k, f[i]] " " x } }
END { for (j = 1; j <= nk; j++) { k = keys[j]; split(k, p, "|");
    line = sprintf("median%s shape=%s hosts=%s size=%s", p[1] != "" ? " build=" p[1] : "", p[2], p[3], p[4]);
    verdict = "";
    for (i = 1; i <= nf; i++) if ((k, f[i]) in l) {
        n = sorted(l[k, f[i]], s); m = med(s, n);
        if (f[i] ~ /_us$/) { line = line sprintf(m >= 100 ? " %s=%.0f" : " %s=%.3g", f[i], m); continue }
        pct = f[i] == "of_ucx" ? "%" : "";
        fmt = pct != "" ? "%.0f" : "%.2f";
        line = line sprintf(" %s=" fmt "%s[" fmt "-" fmt "%s", f[i], m, pct, s[1], s[n], pct);
        if (n >= 6) {
            lo = int(n / 2 - 0.98 * sqrt(n)); hi = n / 2 + 1 + 0.98 * sqrt(n);
            hi = hi == int(hi) ? hi : int(hi) + 1;
            if (lo < 1) lo = 1;
            if (hi > n) hi = n;
            line = line sprintf(",ci95:" fmt "-" fmt "%s", s[lo], s[hi], pct);
            if (f[i] == "bestmpi/todist")
                verdict = s[lo] > 1 ? "faster" : s[hi] < 1 ? "slower" : "tie"
        }
        line = line "]" }
    if (verdict != "") line = line " todist=" verdict;
    print line } }
