#!/usr/bin/env bash
# One-node SLURM cluster on localhost, for tests of the submitit launcher.
#
#   bash slurm/local_cluster.sh up      # install (Debian, root) + configure + start; prints export line(s)
#   bash slurm/local_cluster.sh down    # stop the daemons this script started (idempotent)
#   bash slurm/local_cluster.sh status  # daemon PIDs and sinfo
#
# `up` prints only `export NAME=VALUE` lines on stdout (progress and errors go to stderr), so
#   eval "$(bash slurm/local_cluster.sh up)"
# sets up the calling shell. It needs root on a Debian-like system (apt-get) unless slurmctld, slurmd,
# the SLURM client tools and munged are already installed. No systemd is needed: munged, slurmctld
# and slurmd run in the foreground mode (-F / -D), detached with setsid, and their PIDs are kept in
# the state directory. The node runs without cgroups (proctrack/linuxproc, task/none), without
# slurmdbd (so `sacct` does not work and submitit reports job states as UNKNOWN), and with short
# scheduler/credential timeouts so that a requeued job runs again within seconds.
#
# Environment:
#   NEGMINE_SLURM_DIR      state directory (default /tmp/negmine-slurm): config, munge key and
#                          socket, spool/state directories, logs, PID files
#   NEGMINE_SLURM_TIMEOUT  seconds `up` waits for the node to become idle (default 60)
#   NEGMINE_SLURM_PORT     slurmctld port (default 6817); slurmd uses the next one
#
# Every `up` starts slurmctld with a cleared state (-c: no jobs survive a restart); job ids go on
# counting while the state directory is kept and restart at 1 in a new one, so use a fresh submitit
# folder per cluster.

set -euo pipefail

STATE_DIR=$(realpath -m "${NEGMINE_SLURM_DIR:-/tmp/negmine-slurm}")
TIMEOUT=${NEGMINE_SLURM_TIMEOUT:-60}
CTLD_PORT=${NEGMINE_SLURM_PORT:-6817}
SLURMD_PORT=$((CTLD_PORT + 1))
PACKAGES=(slurmctld slurmd slurm-client munge)
DAEMONS=(munged slurmctld slurmd) # start order; stopped in reverse

CONF=$STATE_DIR/etc/slurm.conf
RUN=$STATE_DIR/run
LOG=$STATE_DIR/log
MUNGE_DIR=$STATE_DIR/munge
MUNGE_KEY=$MUNGE_DIR/munge.key
MUNGE_SOCKET=$MUNGE_DIR/socket/munge.socket.2
NODE=$(hostname -s 2>/dev/null || hostname)

log() { printf '[local_cluster] %s\n' "$*" >&2; }

die() { # message: print it and exit 1
    log "ERROR: $*"
    exit 1
}

die_logs() { # message: print it with the tails of this run's daemon logs and exit 1
    log "ERROR: $*"
    local f
    for f in "$LOG"/munged.out "$LOG"/slurmctld.out "$LOG"/slurmd.out; do
        # slurmctld and slurmd log the same lines to their .log files: show those where they exist.
        [[ -s ${f%.out}.log ]] && f=${f%.out}.log
        [[ -s $f ]] || continue
        printf -- '--- last lines of %s ---\n' "$f" >&2
        tail -n 15 "$f" >&2 || true
    done
    stop_daemons # do not leave a half-started cluster behind
    exit 1
}

alive() { # process $1 exists and is not a zombie
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [[ ${stat:0:1} != Z ]]
}

pid_of() { # the recorded PID of daemon $1 if that process is still alive, else nothing
    local f=$RUN/$1.pid pid
    [[ -f $f ]] || return 1
    pid=$(<"$f")
    [[ $pid =~ ^[0-9]+$ ]] || return 1
    alive "$pid" || return 1
    # Guard against PID reuse: the process must still be the daemon we started.
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$1" ]] || return 1
    echo "$pid"
}

export_lines() {
    printf 'export SLURM_CONF=%q\n' "$CONF"
}

node_state() { # the node's state as sinfo prints it (e.g. idle, mixed, idle*, down*), or nothing
    SLURM_CONF=$CONF timeout 10 sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n 1 || true
}

# ---------------------------------------------------------------------------------------------
# install

have_binaries() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v sinfo >/dev/null && command -v sbatch >/dev/null &&
        command -v srun >/dev/null && command -v munged >/dev/null
}

install_packages() {
    have_binaries && return 0
    [[ $EUID -eq 0 ]] || die "SLURM is not installed and installing it needs root (running as uid $EUID)"
    command -v apt-get >/dev/null ||
        die "SLURM is not installed and there is no apt-get to install it (not Debian?)"
    log "installing ${PACKAGES[*]} with apt-get"
    mkdir -p "$LOG"
    local apt=(apt-get install -y -q --no-install-recommends "${PACKAGES[@]}")
    if ! DEBIAN_FRONTEND=noninteractive "${apt[@]}" >"$LOG/apt.txt" 2>&1; then
        log "apt-get install failed; running apt-get update and retrying"
        DEBIAN_FRONTEND=noninteractive apt-get update -q >>"$LOG/apt.txt" 2>&1 ||
            die "apt-get update failed: $(tail -n 5 "$LOG/apt.txt")"
        DEBIAN_FRONTEND=noninteractive "${apt[@]}" >>"$LOG/apt.txt" 2>&1 ||
            die "apt-get install ${PACKAGES[*]} failed: $(tail -n 10 "$LOG/apt.txt")"
    fi
    have_binaries || die "installed ${PACKAGES[*]} but the binaries are still missing from PATH"
}

# ---------------------------------------------------------------------------------------------
# configuration

node_hardware() { # "CPUs=.. Boards=.. SocketsPerBoard=.. CoresPerSocket=.. ThreadsPerCore=.."
    local line word out=()
    line=$(slurmd -C 2>/dev/null | head -n 1 || true)
    for word in $line; do
        case $word in
        CPUs=* | Boards=* | SocketsPerBoard=* | CoresPerSocket=* | ThreadsPerCore=*) out+=("$word") ;;
        esac
    done
    if [[ ${#out[@]} -eq 5 ]]; then
        echo "${out[*]}"
    else
        echo "CPUs=$(nproc --all 2>/dev/null || nproc)"
    fi
}

write_config() {
    local mem_total real_mem hw
    mem_total=$(awk '/^MemTotal:/ {print int($2 / 1024)}' /proc/meminfo)
    real_mem=$((mem_total * 95 / 100)) # a bit under the real memory, or slurmd drains the node
    ((real_mem >= 1)) || real_mem=1
    hw=$(node_hardware)
    mkdir -p "$STATE_DIR/etc"
    cat >"$CONF.tmp" <<EOF
# Written by slurm/local_cluster.sh; rewritten by every 'up'.
ClusterName=negmine
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: a requeued job may start again only after its credential has expired (default 120 s).
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=5
StateSaveLocation=$STATE_DIR/spool/ctld
SlurmdSpoolDir=$STATE_DIR/spool/d
SlurmctldPidFile=$RUN/slurmctld.daemon.pid
SlurmdPidFile=$RUN/slurmd.daemon.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,bf_interval=1,sched_min_interval=0,sched_interval=1
ReturnToService=2
JobRequeue=1
KillWait=5
InactiveLimit=0
MinJobAge=600
SlurmctldTimeout=60
SlurmdTimeout=60
NodeName=$NODE NodeAddr=127.0.0.1 $hw RealMemory=$real_mem State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
    mv "$CONF.tmp" "$CONF"
}

make_dirs() {
    mkdir -p "$STATE_DIR" "$RUN" "$LOG" "$STATE_DIR/spool/ctld" "$STATE_DIR/spool/d" "$MUNGE_DIR/socket"
    # munged refuses directories that others can write to; its socket folder must be world-executable.
    chmod 0755 "$STATE_DIR" "$MUNGE_DIR" "$MUNGE_DIR/socket"
    chmod 0700 "$RUN" "$STATE_DIR/spool/ctld" "$STATE_DIR/spool/d"
    chmod 0755 "$LOG"
    if [[ ! -s $MUNGE_KEY ]]; then
        log "creating munge key $MUNGE_KEY"
        (umask 077 && dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none)
    fi
    chmod 0600 "$MUNGE_KEY"
}

# ---------------------------------------------------------------------------------------------
# daemons

start_daemon() { # name, command...; detached from this script's session and stdio
    local name=$1 pid
    shift
    # fd 9 holds the lock of this script: do not let the daemon inherit it.
    SLURM_CONF=$CONF setsid "$@" </dev/null >"$LOG/$name.out" 2>&1 9>&- &
    pid=$!
    echo "$pid" >"$RUN/$name.pid"
    # $! is the forked shell until it has exec'd the daemon (setsid execs without forking: the child
    # is no process group leader); pid_of checks the command name, so wait for the exec.
    local deadline=$((SECONDS + 10))
    until [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]]; do
        alive "$pid" || die_logs "$name exited right after it was started"
        if ((SECONDS >= deadline)); then
            kill -KILL "$pid" 2>/dev/null || true
            die_logs "$name (pid $pid) did not start within 10 s"
        fi
        sleep 0.05
    done
    log "started $name (pid $pid)"
}

port_in_use() { # true if something accepts TCP connections on 127.0.0.1:$1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_for() { # description, seconds, command...: poll until the command succeeds
    local what=$1 secs=$2 deadline
    shift 2
    deadline=$((SECONDS + secs))
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        check_alive "waiting for $what"
        sleep 0.2
    done
}

check_alive() {
    local d
    for d in "${DAEMONS[@]}"; do
        [[ -f $RUN/$d.pid ]] || continue
        pid_of "$d" >/dev/null || die_logs "$d exited while $1"
    done
}

munge_ready() { [[ -S $MUNGE_SOCKET ]] && munge -n -S "$MUNGE_SOCKET" </dev/null 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }
ctld_ready() { SLURM_CONF=$CONF timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP'; }
node_idle() { [[ $(node_state) == idle ]]; }

all_running() {
    local d
    for d in "${DAEMONS[@]}"; do pid_of "$d" >/dev/null || return 1; done
}

cmd_up() {
    [[ $EUID -eq 0 ]] || die "must run as root (SlurmUser=root; uid is $EUID)"
    mkdir -p "$STATE_DIR" "$RUN" "$LOG"
    exec 9>"$STATE_DIR/.lock"
    flock -w 600 9 || die "could not lock $STATE_DIR/.lock"

    if all_running && [[ -f $CONF ]]; then
        local state
        state=$(node_state)
        case $state in
        idle | mixed | allocated | completing)
            log "already up (node $NODE is $state)"
            export_lines
            return 0
            ;;
        esac
        log "daemons are running but node $NODE is '${state:-not answering}'; restarting them"
    fi
    stop_daemons

    local t0=$SECONDS
    install_packages
    local port
    for port in "$CTLD_PORT" "$SLURMD_PORT"; do
        ! port_in_use "$port" ||
            die "port $port on 127.0.0.1 is in use by another process (another SLURM?); set NEGMINE_SLURM_PORT"
    done
    make_dirs
    write_config
    rm -rf "$LOG"/*.log "$LOG"/*.out "$STATE_DIR"/spool/d/* # logs and job scripts of earlier runs
    cd "$STATE_DIR" # the daemons' working directory

    start_daemon munged munged -F --force --key-file="$MUNGE_KEY" --socket="$MUNGE_SOCKET" \
        --pid-file="$RUN/munged.daemon.pid" --log-file="$LOG/munged.log" --seed-file="$MUNGE_DIR/munged.seed"
    wait_for "munged" 15 munge_ready || die_logs "munged did not answer on $MUNGE_SOCKET within 15 s"

    start_daemon slurmctld slurmctld -D -c -i -f "$CONF"
    wait_for "slurmctld" 30 ctld_ready || die_logs "slurmctld did not answer within 30 s"

    start_daemon slurmd slurmd -D -N "$NODE" -f "$CONF"
    if ! wait_for "node $NODE to become idle" "$TIMEOUT" node_idle; then
        SLURM_CONF=$CONF sinfo -N -l >&2 2>/dev/null || true
        SLURM_CONF=$CONF sinfo -R >&2 2>/dev/null || true
        die_logs "node $NODE is '$(node_state)', not idle, after ${TIMEOUT} s"
    fi
    log "node $NODE is idle after $((SECONDS - t0)) s"
    export_lines
}

our_stepds() { # PIDs of slurmstepd processes started by this cluster's slurmd (they carry its SLURM_CONF)
    local p
    for p in $(pgrep -x slurmstepd || true); do
        grep -qzxF "SLURM_CONF=$CONF" "/proc/$p/environ" 2>/dev/null && echo "$p"
    done
    return 0
}

with_descendants() { # the given PIDs and all their descendants
    [[ $# -gt 0 ]] || return 0
    ps -e -o pid=,ppid= | awk -v roots="$*" '
        BEGIN { n = split(roots, r, " "); for (i = 1; i <= n; i++) keep[r[i]] = 1 }
        { parent[$1] = $2 }
        END {
            do { changed = 0
                 for (p in parent) if (!(p in keep) && (parent[p] in keep)) { keep[p] = 1; changed = 1 }
            } while (changed)
            for (p in keep) print p
        }'
}

terminate() { # what, PIDs...: TERM, and KILL what is left after 5 s
    local what=$1 pid deadline=$((SECONDS + 5)) left
    shift
    kill -TERM "$@" 2>/dev/null || true
    for pid in "$@"; do
        while alive "$pid" && ((SECONDS < deadline)); do sleep 0.1; done
    done
    left=()
    for pid in "$@"; do alive "$pid" && left+=("$pid"); done
    if [[ ${#left[@]} -gt 0 ]]; then
        log "$what (pid ${left[*]}) still running 5 s after TERM; sending KILL"
        kill -KILL "${left[@]}" 2>/dev/null || true
    else
        log "stopped $what (pid $*)"
    fi
}

stop_daemons() {
    local i d pid ids deadline
    # Cancel the jobs while slurmd is alive, or their slurmstepd and job processes outlive it.
    if pid_of slurmctld >/dev/null && pid_of slurmd >/dev/null && [[ -f $CONF ]]; then
        ids=$(SLURM_CONF=$CONF timeout 5 squeue -h -o %i 2>/dev/null || true)
        if [[ -n $ids ]]; then
            log "cancelling jobs: $(echo "$ids" | tr '\n' ' ')"
            # shellcheck disable=SC2086 # one word per job id
            SLURM_CONF=$CONF timeout 10 scancel $ids >/dev/null 2>&1 || true
            deadline=$((SECONDS + 15)) # KillWait=5
            while ((SECONDS < deadline)) && [[ -n $(our_stepds) ]]; do sleep 0.2; done
        fi
    fi
    # One at a time, slurmd first: slurmd and slurmctld still talk to munged while they shut down.
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
        d=${DAEMONS[i]}
        pid=$(pid_of "$d") || continue
        terminate "$d" "$pid"
    done
    # Steps left over (jobs that ignored the cancel, or slurmd died earlier): kill them with their processes.
    local strays
    # shellcheck disable=SC2046 # one word per PID
    mapfile -t strays < <(with_descendants $(our_stepds))
    if [[ ${#strays[@]} -gt 0 ]]; then
        log "killing leftover job processes: ${strays[*]}"
        terminate "job processes" "${strays[@]}"
    fi
    for d in "${DAEMONS[@]}"; do rm -f "$RUN/$d.pid" "$RUN/$d.daemon.pid"; done
}

cmd_down() {
    [[ -d $STATE_DIR ]] || return 0
    exec 9>"$STATE_DIR/.lock"
    flock -w 120 9 || die "could not lock $STATE_DIR/.lock"
    stop_daemons
}

cmd_status() {
    local d pid rc=0
    for d in "${DAEMONS[@]}"; do
        if pid=$(pid_of "$d"); then echo "$d: running (pid $pid)"; else echo "$d: not running"; rc=1; fi
    done
    if [[ -f $CONF ]] && pid_of slurmctld >/dev/null; then
        SLURM_CONF=$CONF sinfo -N -l || rc=1
        export_lines
    fi
    return "$rc"
}

case ${1:-} in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
*)
    echo "usage: $0 up|down|status" >&2
    exit 2
    ;;
esac
