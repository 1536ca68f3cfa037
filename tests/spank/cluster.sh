# cluster.sh: what the tests that start a real Slurm cluster share
# (test_spank_slurm.sh: nodes on this network stack; test_spank_hosts.sh:
# nodes on emulated hosts). Source it after tests/lib.sh. POSIX sh.
#   cluster_require          skips the test unless root, Slurm's programs
#                            and the plugin are there (sets $plugin; PATH
#                            gains /usr/sbin); in a sanitizer build, skips
#                            or preloads the sanitizer (TD_SPANK_ASAN=1)
#   cluster_munge D [RUN...] a munge key of the cluster's own and munged
#                            with its socket in D/munge (started through
#                            RUN, e.g. on a host); status 0 once it answers
#   cluster_conf D           the slurm.conf lines both clusters share, every
#                            path under D (then: SlurmctldHost, ports,
#                            MpiParams, nodes and partition)
#   wait_for SECONDS CMD...  polls CMD until it succeeds or SECONDS pass

cluster_require() {
    plugin=$top_builddir/spank/.libs/todist.so
    [ -f "$plugin" ] || skip_all "SPANK plugin not built (no slurm/spank.h)"
    [ "$(id -u)" = 0 ] || skip_all "needs root to run slurmd and munged"
    for b in munged mungekey slurmctld slurmd srun sbatch salloc squeue sinfo scontrol unshare; do
        command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] ||
            skip_all "$b not installed (scripts/install-deps.sh installs Slurm)"
    done
    PATH=$PATH:/usr/sbin
    # A sanitizer build's plugin needs the ASan runtime loaded first, which
    # Slurm's programs lack. TD_SPANK_ASAN=1 preloads it into srun and the
    # daemons (the plugin then runs under ASan for real), but ASan in the
    # multi-threaded, forking slurmstepd can deadlock, so it is opt-in.
    if readelf -d "$plugin" 2>/dev/null | grep 'libtsan' >/dev/null; then
        skip_all "ThreadSanitizer build: Slurm's programs cannot load todist.so"
    fi
    if readelf -d "$plugin" 2>/dev/null | grep 'libasan' >/dev/null; then
        [ "${TD_SPANK_ASAN:-0}" = 1 ] ||
            skip_all "sanitizer build: todist.so needs ASan preloaded into Slurm (set TD_SPANK_ASAN=1)"
        LD_PRELOAD="$(${TD_CC:-cc} -print-file-name=libasan.so) $(${TD_CC:-cc} -print-file-name=libubsan.so)"
        ASAN_OPTIONS=detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}
        export LD_PRELOAD ASAN_OPTIONS
    fi
}

wait_for() { # seconds cmd...
    end=$(( $(date +%s) + $1 )); shift
    while ! "$@" >/dev/null 2>&1; do
        [ "$(date +%s)" -ge "$end" ] && return 1
        sleep 0.2
    done
}

cluster_munge() { # D [RUN...]
    _d=$1; shift
    mkdir -p "$_d/munge" && chmod 0700 "$_d/munge" || return 1
    mungekey --create --keyfile="$_d/munge/munge.key" --bits=1024 \
        2>"$_d/mungekey.log" || return 1
    chmod 0400 "$_d/munge/munge.key"
    "$@" munged --force --socket="$_d/munge/munge.sock" \
        --key-file="$_d/munge/munge.key" --pid-file="$_d/munged.pid" \
        --log-file="$_d/munged.log" --seed-file="$_d/munge/seed" \
        >"$_d/munged.out" 2>&1 || return 1
    wait_for 10 "$@" sh -c "munge -S '$_d/munge/munge.sock' -n | unmunge -S '$_d/munge/munge.sock'"
}

cluster_conf() { # D
    cat <<CONF
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$1/munge/munge.sock
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$1/state
SlurmdSpoolDir=$1/spool/%n
SlurmctldPidFile=$1/slurmctld.pid
SlurmdPidFile=$1/slurmd-%n.pid
SlurmctldLogFile=$1/slurmctld.log
SlurmdLogFile=$1/slurmd-%n.log
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
TmpFS=$1/tmpfs/%n
PlugStackConfig=$1/plugstack.conf
CONF
}
