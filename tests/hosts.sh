# hosts.sh: a test bed of emulated hosts on one machine (docs/hosts.md).
#
# Each host is a network namespace with one veth link to a bridge that lives
# in a namespace of its own (the "switch"), so nothing is added to the
# machine's own network stack and two beds never share an address. A host
# also has its own UTS (hostname), IPC, mount and PID namespaces, held open
# by an init process: its own /etc/hosts, kernel boot id (bind-mounted),
# private /dev/shm and /tmp. Every command started on a host enters all of
# them, so two commands on one host share its /dev/shm and pids, and no
# process of one host can read another's memory (process_vm_readv) or map
# its shared memory.
#
# Source it after tests/lib.sh (its TD_TMP is then shared with every host,
# at the same path) or alone (bench/). POSIX sh. Functions:
#   hosts_supported        0, or 1 with the reason in HOSTS_WHY
#   hosts_up N             N hosts, h1..hN at 10.91.0.1..N (HOSTS_N, HOSTS_DIR),
#                          whose kernels keep a TCP connection through 120
#                          unanswered keepalive probes (a cut of 2 min);
#                          HOSTS_RAILS=R (1..4, default 1): R links per host,
#                          rail r (1..R) is interface eth<r-1> on a bridge
#                          of its own, at 10.91.<r-1>.I
#   hosts_name I / hosts_addr I [R]
#   hosts_rename I NAME    host I's hostname becomes NAME, which every
#                          host's /etc/hosts then resolves to its address
#   hosts_run I CMD...     run CMD on host I (cwd kept; status returned)
#   hosts_launch LAYOUT PROG ARGS...
#                          a todist job: LAYOUT "2,1,1" is ranks per host;
#                          every rank gets the TODIST_* and torchrun
#                          variables, runs under HOSTS_TIMEOUT seconds (120);
#                          prints every rank's output in rank order, returns
#                          the first failing rank's status
#   hosts_rate I RATE [R]  limit host I's links (rail R's only) both ways
#                          (tc tbf), "" lifts it
#   hosts_bytes I [R]      "TX RX": bytes host I's interfaces (rail R's)
#                          sent, received
#   hosts_cut I [R] / hosts_restore I [R]
#                          take host I's links (rail R's) off their bridges
#                          and put them back (its interfaces stay up:
#                          packets are lost, as in a partition, rather than
#                          refused)
#   hosts_kill I           kill every process of host I (its init)
#   hosts_down             tear everything down; also runs on exit
# Names are unique per invocation (td<pid>x<k>h<i>): helpers run
# side by side.
# Every variable this file sets is named HOSTS_*, hosts_* or _hosts_*, the
# functions' own included: they share the caller's variables (POSIX sh
# has no local ones), and a test's own _r was once overwritten by
# hosts_cut's. tests/tree/test_scan.sh checks it
# (scripts/scan-sh-globals.sh).
HOSTS_N=0
HOSTS_ID=""
HOSTS_DIR=""
HOSTS_WHY=""
HOSTS_NET=10.91.0
_hosts_rails=1
HOSTS_PORT=29400
_hosts_k=0

hosts_supported() {
    if [ "$(id -u)" != 0 ]; then
        HOSTS_WHY="hosts need root (network namespaces)"; return 1
    fi
    for _hosts_c in ip tc nsenter unshare timeout; do
        if ! command -v "$_hosts_c" >/dev/null 2>&1; then
            HOSTS_WHY="hosts need $_hosts_c"; return 1
        fi
    done
    _hosts_pns="td$$probe"
    if ! ip netns add "$_hosts_pns" 2>/dev/null; then
        HOSTS_WHY="network namespaces are not permitted here"; return 1
    fi
    # a second rail: a bridge and a veth pair of its own (as hosts_up)
    if [ "${HOSTS_RAILS:-1}" != 1 ] &&
       ! { ip -n "$_hosts_pns" link add br1 type bridge &&
           ip -n "$_hosts_pns" link add r1 type veth peer name r1b
         } 2>/dev/null; then
        ip netns del "$_hosts_pns"
        HOSTS_WHY="no second bridge and veth pair here (HOSTS_RAILS)"
        return 1
    fi
    ip netns del "$_hosts_pns"
    if ! unshare --mount --uts --ipc --pid --fork --mount-proc \
            sh -c 'mount -t tmpfs tmpfs /dev/shm' 2>/dev/null; then
        HOSTS_WHY="mount/PID namespaces are not permitted here"; return 1
    fi
    return 0
}

hosts_name() { echo "h$1"; }
# Rail R's subnet is the one after rail R-1's: 10.91.0, 10.91.1, ...
hosts_addr() { # I [R]
    echo "${HOSTS_NET%.*}.$((${HOSTS_NET##*.} + ${2:-1} - 1)).$1"
}
_hosts_ns() { echo "${HOSTS_ID}h$1"; }
# Rail R of host I: its interface there, its end on the switch, its bridge.
_hosts_if() { echo "eth$(($1 - 1))"; }
_hosts_swif() { if [ "$2" = 1 ]; then echo "h$1"; else echo "h${1}r$2"; fi; }
_hosts_br() { echo "br$(($1 - 1))"; }
# The rails of host I's call: R alone, else all of them.
_hosts_rails_of() { # [R]
    if [ -n "${1:-}" ]; then echo "$1"; return 0; fi
    _hosts_hr=1
    while [ $_hosts_hr -le "$_hosts_rails" ]; do
        echo $_hosts_hr; _hosts_hr=$((_hosts_hr + 1))
    done
}

# Appended in place: every host's /etc/hosts is a bind mount of this file.
hosts_rename() { # I NAME
    echo "$(hosts_addr "$1") $2" >> "$HOSTS_DIR/etc_hosts" &&
    hosts_run "$1" sh -c 'echo "$1" > /proc/sys/kernel/hostname' sh "$2"
}

# The init of host I: its mounts and name, then it holds the namespaces.
_hosts_init() { # I
    _hosts_ih="$HOSTS_DIR/h$1"
    cat > "$_hosts_ih/init.sh" <<EOF
set -e
echo h$1 > /proc/sys/kernel/hostname
mount --bind "$_hosts_ih/boot_id" /proc/sys/kernel/random/boot_id
mount --bind "$HOSTS_DIR/etc_hosts" /etc/hosts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# The network devices under /sys are those of the namespace that mounted
# it: the machine's, unless this host mounts a sysfs of its own (UCX lists
# its TCP devices from /sys/class/net: a host saw the machine's eth0 and
# lo, never an eth1). Only the net views are replaced (cgroups and the
# rest of /sys stay the machine's); where that is refused the host keeps
# the machine's view.
if mkdir -p "$_hosts_ih/sys" && mount -t sysfs sysfs "$_hosts_ih/sys"; then
    mount --bind "$_hosts_ih/sys/class/net" /sys/class/net
    mount --bind "$_hosts_ih/sys/devices/virtual/net" /sys/devices/virtual/net
fi
EOF
    # /tmp is private; what the commands need keeps its path inside it:
    # the shared folder, the build and source trees (a checkout under /tmp
    # would otherwise vanish inside the hosts) and HOSTS_SHARE's paths.
    for _hosts_ip in "$_hosts_share" ${top_builddir:+"$top_builddir"} \
              ${top_srcdir:+"$top_srcdir"} ${HOSTS_SHARE:-}; do
        _hosts_ip=$(cd "$_hosts_ip" 2>/dev/null && pwd -P) || continue
        case $_hosts_ip in
        /tmp/?*)
            _hosts_rel=${_hosts_ip#/tmp/}
            mkdir -p "$_hosts_ih/tmp/$_hosts_rel"
            echo "mount --bind '$_hosts_ip' '$_hosts_ih/tmp/$_hosts_rel'" \
                >> "$_hosts_ih/init.sh"
            ;;
        esac
    done
    cat >> "$_hosts_ih/init.sh" <<EOF
mount --rbind "$_hosts_ih/tmp" /tmp
: > "$_hosts_ih/ready"
exec sleep 2147483647
EOF
}

hosts_up() { # N
    hosts_down
    case ${HOSTS_RAILS:-1} in
    1|2|3|4) _hosts_rails=${HOSTS_RAILS:-1} ;;
    *) echo "hosts: HOSTS_RAILS=$HOSTS_RAILS: 1 to 4" >&2; return 1 ;;
    esac
    _hosts_k=$((_hosts_k + 1))
    HOSTS_ID="td$$x$_hosts_k"
    HOSTS_N=$1
    if [ -n "${TD_TMP:-}" ]; then
        HOSTS_DIR="$TD_TMP/hosts$_hosts_k"; mkdir -p "$HOSTS_DIR"
        _hosts_share=$TD_TMP
    else
        HOSTS_DIR=$(mktemp -d "${TMPDIR:-/tmp}/todist-hosts.XXXXXX")
        _hosts_share=$HOSTS_DIR
    fi
    _hosts_sw="${HOSTS_ID}sw"
    ip netns add "$_hosts_sw" || return 1
    for _hosts_r in $(_hosts_rails_of); do
        ip -n "$_hosts_sw" link add "$(_hosts_br $_hosts_r)" type bridge ||
            return 1
        ip -n "$_hosts_sw" link set "$(_hosts_br $_hosts_r)" up || return 1
    done
    cp /etc/hosts "$HOSTS_DIR/etc_hosts"
    _hosts_i=1
    while [ $_hosts_i -le "$1" ]; do
        echo "$(hosts_addr $_hosts_i) $(hosts_name $_hosts_i)" \
            >> "$HOSTS_DIR/etc_hosts"
        _hosts_i=$((_hosts_i + 1))
    done
    _hosts_i=1
    while [ $_hosts_i -le "$1" ]; do
        _hosts_netns=$(_hosts_ns $_hosts_i)
        _hosts_h="$HOSTS_DIR/h$_hosts_i"
        mkdir -p "$_hosts_h/tmp"
        chmod 1777 "$_hosts_h/tmp"
        cat /proc/sys/kernel/random/uuid > "$_hosts_h/boot_id"
        ip netns add "$_hosts_netns" || return 1
        for _hosts_r in $(_hosts_rails_of); do
            _hosts_dev=$(_hosts_if $_hosts_r)
            ip -n "$_hosts_sw" link add "$(_hosts_swif $_hosts_i $_hosts_r)" \
                type veth peer name "$_hosts_dev" netns "$_hosts_netns" ||
                return 1
            ip -n "$_hosts_sw" link set "$(_hosts_swif $_hosts_i $_hosts_r)" \
                master "$(_hosts_br $_hosts_r)" up || return 1
            ip -n "$_hosts_netns" addr add \
                "$(hosts_addr $_hosts_i $_hosts_r)/24" dev "$_hosts_dev" ||
                return 1
            ip -n "$_hosts_netns" link set "$_hosts_dev" up || return 1
        done
        ip -n "$_hosts_netns" link set lo up || return 1
        # An idle TCP connection is given up by its kernel after
        # tcp_keepalive_probes unanswered probes: 9 by default, ~10 s into
        # a cut with the probes a rank turns on (idle 1 s, then every 1 s:
        # runtime/liveness.h V6). A test cuts a link to see todist's own
        # verdict (a drop after TODIST_LIVENESS, a peer told it was
        # dropped); a loaded machine made a cut outlast those 10 s, and UCX
        # reported a loss instead. 120: no connection dies within 2 min.
        ip netns exec "$_hosts_netns" sh -c \
            'echo 120 > /proc/sys/net/ipv4/tcp_keepalive_probes' ||
            return 1
        _hosts_init $_hosts_i
        # Detached (not a child of the caller: a bare wait must not wait
        # for it).
        (nsenter --net="/run/netns/$_hosts_netns" unshare --mount --uts \
            --ipc --pid --fork --mount-proc --propagation private \
            sh "$_hosts_h/init.sh" \
            > "$_hosts_h/init.log" 2>&1 < /dev/null &
         echo $! > "$_hosts_h/unshare.pid")
        _hosts_i=$((_hosts_i + 1))
    done
    # Wait (bounded) for every init to be ready, then note its pid.
    _hosts_i=1
    while [ $_hosts_i -le "$1" ]; do
        _hosts_h="$HOSTS_DIR/h$_hosts_i"
        _hosts_t=0
        while [ ! -e "$_hosts_h/ready" ]; do
            _hosts_u=$(cat "$_hosts_h/unshare.pid")
            if [ $_hosts_t -ge 100 ] || ! kill -0 "$_hosts_u" 2>/dev/null; then
                echo "hosts: host $_hosts_i did not start:" \
                     "$(cat "$_hosts_h/init.log")" >&2
                return 1
            fi
            sleep 0.1; _hosts_t=$((_hosts_t + 1))
        done
        _hosts_u=$(cat "$_hosts_h/unshare.pid")
        read -r _hosts_p _hosts_rest < "/proc/$_hosts_u/task/$_hosts_u/children"
        echo "$_hosts_p" > "$_hosts_h/init.pid"
        _hosts_i=$((_hosts_i + 1))
    done
    # ...and (bounded) for every link to be up: the kernel marks a new
    # one running (IFF_RUNNING) a moment after it is set up, and UCX
    # leaves out an interface not running when it starts (a rank started
    # at once then had one TCP lane of two, on the rail that was ready).
    _hosts_i=1
    while [ $_hosts_i -le "$1" ]; do
        for _hosts_r in $(_hosts_rails_of); do
            _hosts_t=0
            until ip -n "$(_hosts_ns $_hosts_i)" -o link show dev \
                    "$(_hosts_if $_hosts_r)" | grep "state UP" > /dev/null; do
                if [ $_hosts_t -ge 100 ]; then
                    echo "hosts: host $_hosts_i's $(_hosts_if $_hosts_r)" \
                         "is not up" >&2
                    return 1
                fi
                sleep 0.1; _hosts_t=$((_hosts_t + 1))
            done
        done
        _hosts_i=$((_hosts_i + 1))
    done
}

_hosts_init_pid() { cat "$HOSTS_DIR/h$1/init.pid" 2>/dev/null; }

hosts_run() { # I CMD...
    _hosts_rp=$(_hosts_init_pid "$1") || return 1
    shift
    nsenter -t "$_hosts_rp" --net --uts --ipc --mount --pid --wd="$PWD" -- "$@"
}

hosts_rate() { # I RATE [R]
    _hosts_rns=$(_hosts_ns "$1")
    for _hosts_r in $(_hosts_rails_of "${3:-}"); do
        _hosts_rdev=$(_hosts_if $_hosts_r)
        _hosts_rsdev=$(_hosts_swif "$1" $_hosts_r)
        if [ -z "$2" ]; then
            ip netns exec "$_hosts_rns" tc qdisc del dev "$_hosts_rdev" \
                root 2>/dev/null
            ip netns exec "${HOSTS_ID}sw" tc qdisc del dev "$_hosts_rsdev" \
                root 2>/dev/null
            continue
        fi
        ip netns exec "$_hosts_rns" tc qdisc replace dev "$_hosts_rdev" \
            root tbf rate "$2" burst 8mb latency 50ms &&
        ip netns exec "${HOSTS_ID}sw" tc qdisc replace dev "$_hosts_rsdev" \
            root tbf rate "$2" burst 8mb latency 50ms || return 1
    done
    return 0
}

# Summed over the rails asked for (one read of each counter).
hosts_bytes() { # I [R]
    ip netns exec "$(_hosts_ns "$1")" sh -c '
        tx=0; rx=0
        for i in "$@"; do
            d=/sys/class/net/$i/statistics
            tx=$((tx + $(cat $d/tx_bytes))); rx=$((rx + $(cat $d/rx_bytes)))
        done
        echo $tx $rx' sh $(for _hosts_r in $(_hosts_rails_of "${2:-}"); do
                               _hosts_if $_hosts_r; done)
}

hosts_cut() { # I [R]
    for _hosts_r in $(_hosts_rails_of "${2:-}"); do
        ip -n "${HOSTS_ID}sw" link set "$(_hosts_swif "$1" $_hosts_r)" \
            nomaster || return 1
    done
}
hosts_restore() { # I [R]
    for _hosts_r in $(_hosts_rails_of "${2:-}"); do
        ip -n "${HOSTS_ID}sw" link set "$(_hosts_swif "$1" $_hosts_r)" \
            master "$(_hosts_br $_hosts_r)" || return 1
    done
}

hosts_kill() { # I
    _hosts_kp=$(_hosts_init_pid "$1")
    [ -n "$_hosts_kp" ] && kill -9 "$_hosts_kp" 2>/dev/null
    _hosts_ku=$(cat "$HOSTS_DIR/h$1/unshare.pid" 2>/dev/null)
    _hosts_kt=0
    while [ -n "$_hosts_ku" ] && kill -0 "$_hosts_ku" 2>/dev/null &&
          [ $_hosts_kt -lt 100 ]; do
        sleep 0.05; _hosts_kt=$((_hosts_kt + 1))
    done
    rm -f "$HOSTS_DIR/h$1/init.pid"
    return 0
}

hosts_down() {
    [ -n "$HOSTS_ID" ] || return 0
    _hosts_di=1
    while [ $_hosts_di -le "$HOSTS_N" ]; do
        hosts_kill $_hosts_di
        ip netns del "$(_hosts_ns $_hosts_di)" 2>/dev/null
        _hosts_di=$((_hosts_di + 1))
    done
    ip netns del "${HOSTS_ID}sw" 2>/dev/null
    case $HOSTS_DIR in
    "${TMPDIR:-/tmp}"/todist-hosts.*) rm -rf "$HOSTS_DIR" ;;
    esac
    HOSTS_ID=""
    HOSTS_N=0
}

hosts_launch() { # LAYOUT PROG ARGS...
    _hosts_layout=$1; shift
    _hosts_ws=0; _hosts_nn=0
    for _hosts_c in $(echo "$_hosts_layout" | tr , ' '); do
        _hosts_ws=$((_hosts_ws + _hosts_c)); _hosts_nn=$((_hosts_nn + 1))
    done
    _hosts_tok=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
    _hosts_rank=0; _hosts_node=0; _hosts_pids=""
    for _hosts_c in $(echo "$_hosts_layout" | tr , ' '); do
        _hosts_lrank=0
        while [ $_hosts_lrank -lt "$_hosts_c" ]; do
            hosts_run $((_hosts_node + 1)) env TODIST_RANK=$_hosts_rank \
                TODIST_WORLD_SIZE=$_hosts_ws TODIST_LOCAL_RANK=$_hosts_lrank \
                TODIST_LOCAL_WORLD_SIZE=$_hosts_c \
                TODIST_NODE_RANK=$_hosts_node TODIST_NNODES=$_hosts_nn \
                TODIST_MASTER_ADDR="$(hosts_addr 1)" \
                TODIST_MASTER_PORT=$HOSTS_PORT TODIST_JOB_TOKEN=$_hosts_tok \
                RANK=$_hosts_rank WORLD_SIZE=$_hosts_ws \
                LOCAL_RANK=$_hosts_lrank LOCAL_WORLD_SIZE=$_hosts_c \
                GROUP_RANK=$_hosts_node GROUP_WORLD_SIZE=$_hosts_nn \
                MASTER_ADDR="$(hosts_addr 1)" MASTER_PORT=$((HOSTS_PORT + 1)) \
                timeout -k 5 "${HOSTS_TIMEOUT:-120}" \
                "$@" > "$HOSTS_DIR/rank$_hosts_rank.out" 2>&1 &
            _hosts_pids="$_hosts_pids $!"
            _hosts_lrank=$((_hosts_lrank + 1)); _hosts_rank=$((_hosts_rank + 1))
        done
        _hosts_node=$((_hosts_node + 1))
    done
    _hosts_rc=0; _hosts_rank=0
    for _hosts_lp in $_hosts_pids; do
        wait "$_hosts_lp"; _hosts_s=$?
        [ $_hosts_rc = 0 ] && [ $_hosts_s != 0 ] && _hosts_rc=$_hosts_s
        _hosts_rank=$((_hosts_rank + 1))
    done
    _hosts_rank=0
    while [ $_hosts_rank -lt $_hosts_ws ]; do
        cat "$HOSTS_DIR/rank$_hosts_rank.out"; _hosts_rank=$((_hosts_rank + 1))
    done
    return $_hosts_rc
}

# A signal during the teardown must not cut it short (namespaces and
# every process of the hosts left behind): the exit trap ignores them.
if command -v _td_cleanup >/dev/null 2>&1; then
    trap 'trap "" INT TERM; hosts_down; _td_cleanup' EXIT
else
    trap 'trap "" INT TERM; hosts_down' EXIT
fi
trap 'exit 130' INT TERM
