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
#   hosts_up N             N hosts, h1..hN at 10.91.0.1..N (HOSTS_N, HOSTS_DIR);
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
    for _c in ip tc nsenter unshare timeout; do
        if ! command -v "$_c" >/dev/null 2>&1; then
            HOSTS_WHY="hosts need $_c"; return 1
        fi
    done
    _ns="td$$probe"
    if ! ip netns add "$_ns" 2>/dev/null; then
        HOSTS_WHY="network namespaces are not permitted here"; return 1
    fi
    # a second rail: a bridge and a veth pair of its own (as hosts_up)
    if [ "${HOSTS_RAILS:-1}" != 1 ] &&
       ! { ip -n "$_ns" link add br1 type bridge &&
           ip -n "$_ns" link add r1 type veth peer name r1b; } 2>/dev/null; then
        ip netns del "$_ns"
        HOSTS_WHY="no second bridge and veth pair here (HOSTS_RAILS)"
        return 1
    fi
    ip netns del "$_ns"
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
    _hr=1
    while [ $_hr -le "$_hosts_rails" ]; do echo $_hr; _hr=$((_hr + 1)); done
}

# Appended in place: every host's /etc/hosts is a bind mount of this file.
hosts_rename() { # I NAME
    echo "$(hosts_addr "$1") $2" >> "$HOSTS_DIR/etc_hosts" &&
    hosts_run "$1" sh -c 'echo "$1" > /proc/sys/kernel/hostname' sh "$2"
}

# The init of host I: its mounts and name, then it holds the namespaces.
_hosts_init() { # I
    _h="$HOSTS_DIR/h$1"
    cat > "$_h/init.sh" <<EOF
set -e
echo h$1 > /proc/sys/kernel/hostname
mount --bind "$_h/boot_id" /proc/sys/kernel/random/boot_id
mount --bind "$HOSTS_DIR/etc_hosts" /etc/hosts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# The network devices under /sys are those of the namespace that mounted
# it: the machine's, unless this host mounts a sysfs of its own (UCX lists
# its TCP devices from /sys/class/net: a host saw the machine's eth0 and
# lo, never an eth1). Only the net views are replaced (cgroups and the
# rest of /sys stay the machine's); where that is refused the host keeps
# the machine's view.
if mkdir -p "$_h/sys" && mount -t sysfs sysfs "$_h/sys"; then
    mount --bind "$_h/sys/class/net" /sys/class/net
    mount --bind "$_h/sys/devices/virtual/net" /sys/devices/virtual/net
fi
EOF
    # /tmp is private; what the commands need keeps its path inside it:
    # the shared folder, the build and source trees (a checkout under /tmp
    # would otherwise vanish inside the hosts) and HOSTS_SHARE's paths.
    for _p in "$_hosts_share" ${top_builddir:+"$top_builddir"} \
              ${top_srcdir:+"$top_srcdir"} ${HOSTS_SHARE:-}; do
        _p=$(cd "$_p" 2>/dev/null && pwd -P) || continue
        case $_p in
        /tmp/?*)
            _rel=${_p#/tmp/}
            mkdir -p "$_h/tmp/$_rel"
            echo "mount --bind '$_p' '$_h/tmp/$_rel'" >> "$_h/init.sh"
            ;;
        esac
    done
    cat >> "$_h/init.sh" <<EOF
mount --rbind "$_h/tmp" /tmp
: > "$_h/ready"
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
    _sw="${HOSTS_ID}sw"
    ip netns add "$_sw" || return 1
    for _hosts_r in $(_hosts_rails_of); do
        ip -n "$_sw" link add "$(_hosts_br $_hosts_r)" type bridge || return 1
        ip -n "$_sw" link set "$(_hosts_br $_hosts_r)" up || return 1
    done
    cp /etc/hosts "$HOSTS_DIR/etc_hosts"
    _i=1
    while [ $_i -le "$1" ]; do
        echo "$(hosts_addr $_i) $(hosts_name $_i)" >> "$HOSTS_DIR/etc_hosts"
        _i=$((_i + 1))
    done
    _i=1
    while [ $_i -le "$1" ]; do
        _ns=$(_hosts_ns $_i)
        _h="$HOSTS_DIR/h$_i"
        mkdir -p "$_h/tmp"
        chmod 1777 "$_h/tmp"
        cat /proc/sys/kernel/random/uuid > "$_h/boot_id"
        ip netns add "$_ns" || return 1
        for _hosts_r in $(_hosts_rails_of); do
            _if=$(_hosts_if $_hosts_r)
            ip -n "$_sw" link add "$(_hosts_swif $_i $_hosts_r)" type veth \
                peer name "$_if" netns "$_ns" || return 1
            ip -n "$_sw" link set "$(_hosts_swif $_i $_hosts_r)" \
                master "$(_hosts_br $_hosts_r)" up || return 1
            ip -n "$_ns" addr add "$(hosts_addr $_i $_hosts_r)/24" dev "$_if" ||
                return 1
            ip -n "$_ns" link set "$_if" up || return 1
        done
        ip -n "$_ns" link set lo up || return 1
        _hosts_init $_i
        # Detached (not a child of the caller: a bare wait must not wait
        # for it).
        (nsenter --net="/run/netns/$_ns" unshare --mount --uts --ipc --pid \
            --fork --mount-proc --propagation private sh "$_h/init.sh" \
            > "$_h/init.log" 2>&1 < /dev/null &
         echo $! > "$_h/unshare.pid")
        _i=$((_i + 1))
    done
    # Wait (bounded) for every init to be ready, then note its pid.
    _i=1
    while [ $_i -le "$1" ]; do
        _h="$HOSTS_DIR/h$_i"
        _t=0
        while [ ! -e "$_h/ready" ]; do
            _u=$(cat "$_h/unshare.pid")
            if [ $_t -ge 100 ] || ! kill -0 "$_u" 2>/dev/null; then
                echo "hosts: host $_i did not start: $(cat "$_h/init.log")" >&2
                return 1
            fi
            sleep 0.1; _t=$((_t + 1))
        done
        _u=$(cat "$_h/unshare.pid")
        read -r _p _rest < "/proc/$_u/task/$_u/children"
        echo "$_p" > "$_h/init.pid"
        _i=$((_i + 1))
    done
    # ...and (bounded) for every link to be up: the kernel marks a new
    # one running (IFF_RUNNING) a moment after it is set up, and UCX
    # leaves out an interface not running when it starts (a rank started
    # at once then had one TCP lane of two, on the rail that was ready).
    _i=1
    while [ $_i -le "$1" ]; do
        for _hosts_r in $(_hosts_rails_of); do
            _t=0
            until ip -n "$(_hosts_ns $_i)" -o link show dev \
                    "$(_hosts_if $_hosts_r)" | grep "state UP" > /dev/null; do
                if [ $_t -ge 100 ]; then
                    echo "hosts: host $_i's $(_hosts_if $_hosts_r) is not up" >&2
                    return 1
                fi
                sleep 0.1; _t=$((_t + 1))
            done
        done
        _i=$((_i + 1))
    done
}

_hosts_init_pid() { cat "$HOSTS_DIR/h$1/init.pid" 2>/dev/null; }

hosts_run() { # I CMD...
    _p=$(_hosts_init_pid "$1") || return 1
    shift
    nsenter -t "$_p" --net --uts --ipc --mount --pid --wd="$PWD" -- "$@"
}

hosts_rate() { # I RATE [R]
    _ns=$(_hosts_ns "$1")
    for _hosts_r in $(_hosts_rails_of "${3:-}"); do
        _if=$(_hosts_if $_hosts_r); _sif=$(_hosts_swif "$1" $_hosts_r)
        if [ -z "$2" ]; then
            ip netns exec "$_ns" tc qdisc del dev "$_if" root 2>/dev/null
            ip netns exec "${HOSTS_ID}sw" tc qdisc del dev "$_sif" root \
                2>/dev/null
            continue
        fi
        ip netns exec "$_ns" tc qdisc replace dev "$_if" root tbf \
            rate "$2" burst 8mb latency 50ms &&
        ip netns exec "${HOSTS_ID}sw" tc qdisc replace dev "$_sif" root tbf \
            rate "$2" burst 8mb latency 50ms || return 1
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

# The rail loops' variable is _hosts_r: sh has no locals, and a caller's
# _r (test_hosts_elastic's ready file) was overwritten by hosts_cut.
hosts_cut() { # I [R]
    for _hosts_r in $(_hosts_rails_of "${2:-}"); do
        ip -n "${HOSTS_ID}sw" link set "$(_hosts_swif "$1" $_hosts_r)" nomaster ||
            return 1
    done
}
hosts_restore() { # I [R]
    for _hosts_r in $(_hosts_rails_of "${2:-}"); do
        ip -n "${HOSTS_ID}sw" link set "$(_hosts_swif "$1" $_hosts_r)" \
            master "$(_hosts_br $_hosts_r)" || return 1
    done
}

hosts_kill() { # I
    _p=$(_hosts_init_pid "$1")
    [ -n "$_p" ] && kill -9 "$_p" 2>/dev/null
    _u=$(cat "$HOSTS_DIR/h$1/unshare.pid" 2>/dev/null)
    _t=0
    while [ -n "$_u" ] && kill -0 "$_u" 2>/dev/null && [ $_t -lt 100 ]; do
        sleep 0.05; _t=$((_t + 1))
    done
    rm -f "$HOSTS_DIR/h$1/init.pid"
    return 0
}

hosts_down() {
    [ -n "$HOSTS_ID" ] || return 0
    _i=1
    while [ $_i -le "$HOSTS_N" ]; do
        hosts_kill $_i
        ip netns del "$(_hosts_ns $_i)" 2>/dev/null
        _i=$((_i + 1))
    done
    ip netns del "${HOSTS_ID}sw" 2>/dev/null
    case $HOSTS_DIR in
    "${TMPDIR:-/tmp}"/todist-hosts.*) rm -rf "$HOSTS_DIR" ;;
    esac
    HOSTS_ID=""
    HOSTS_N=0
}

hosts_launch() { # LAYOUT PROG ARGS...
    _layout=$1; shift
    _ws=0; _nn=0
    for _c in $(echo "$_layout" | tr , ' '); do
        _ws=$((_ws + _c)); _nn=$((_nn + 1))
    done
    _tok=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
    _r=0; _node=0; _pids=""
    for _c in $(echo "$_layout" | tr , ' '); do
        _l=0
        while [ $_l -lt "$_c" ]; do
            hosts_run $((_node + 1)) env TODIST_RANK=$_r \
                TODIST_WORLD_SIZE=$_ws TODIST_LOCAL_RANK=$_l \
                TODIST_LOCAL_WORLD_SIZE=$_c TODIST_NODE_RANK=$_node \
                TODIST_NNODES=$_nn TODIST_MASTER_ADDR="$(hosts_addr 1)" \
                TODIST_MASTER_PORT=$HOSTS_PORT TODIST_JOB_TOKEN=$_tok \
                RANK=$_r WORLD_SIZE=$_ws LOCAL_RANK=$_l \
                LOCAL_WORLD_SIZE=$_c GROUP_RANK=$_node GROUP_WORLD_SIZE=$_nn \
                MASTER_ADDR="$(hosts_addr 1)" MASTER_PORT=$((HOSTS_PORT + 1)) \
                timeout -k 5 "${HOSTS_TIMEOUT:-120}" \
                "$@" > "$HOSTS_DIR/rank$_r.out" 2>&1 &
            _pids="$_pids $!"
            _l=$((_l + 1)); _r=$((_r + 1))
        done
        _node=$((_node + 1))
    done
    _rc=0; _r=0
    for _p in $_pids; do
        wait "$_p"; _s=$?
        [ $_rc = 0 ] && [ $_s != 0 ] && _rc=$_s
        _r=$((_r + 1))
    done
    _r=0
    while [ $_r -lt $_ws ]; do
        cat "$HOSTS_DIR/rank$_r.out"; _r=$((_r + 1))
    done
    return $_rc
}

# A signal during the teardown must not cut it short (namespaces and
# every process of the hosts left behind): the exit trap ignores them.
if command -v _td_cleanup >/dev/null 2>&1; then
    trap 'trap "" INT TERM; hosts_down; _td_cleanup' EXIT
else
    trap 'trap "" INT TERM; hosts_down' EXIT
fi
trap 'exit 130' INT TERM
