#!/usr/bin/env bash
# A real 2-node SLURM cluster (node1, node2) with accounting (sacct), plus a VictoriaMetrics
# on 127.0.0.1:18428 for the jobs' telemetry push -- all on this one host, loopback only.
#
#   scripts/local-cluster.sh install   apt-get install slurm-wlm slurmdbd munge mariadb-server victoria-metrics
#   scripts/local-cluster.sh start     start munged, mariadbd, slurmdbd, slurmctld, slurmd node1+node2,
#                                      victoria-metrics; idempotent (a running daemon is skipped);
#                                      FRESH=1 first wipes the accounting DB, the Slurm state and the TSDB
#   scripts/local-cluster.sh stop      cancel all jobs (KEEP_JOBS=1 keeps them), stop the daemons in
#                                      reverse order using only their pid files
#   scripts/local-cluster.sh status    one line per daemon, then sinfo
#
# Cluster dir: $AI4S_CLUSTER_DIR (default /var/lib/ai4s-local-cluster): conf/, run/ (pid files), log/,
# vm-data/. Needs root (it installs /etc/slurm/*.conf and starts daemons as their users).
# The recipe (and every pitfall handled below) is /work/shared/notes/local-slurm.md; the VictoriaMetrics
# flags are from /work/shared/notes/victoriametrics.md.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CLUSTER_DIR="${AI4S_CLUSTER_DIR:-/var/lib/ai4s-local-cluster}"
VM_ADDR="${AI4S_VM_ADDR:-127.0.0.1:18428}"
T0=$(date +%s.%N)

log() { printf '[local-cluster %6.2fs] %s\n' "$(awk -v a="$(date +%s.%N)" -v b="$T0" 'BEGIN{print a-b}')" "$*"; }
die() { echo "local-cluster: $*" >&2; exit 1; }

# A pid counts as alive unless gone or a zombie (pitfall 6: PID 1 here reaps orphans late).
alive() {
    local pid="$1"
    [[ -n "$pid" && -e "/proc/$pid" ]] || return 1
    ! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}
pid_of() { [[ -s "$1" ]] && tr -dc '0-9' <"$1" || true; }
# alive and its /proc/PID/comm starts with the expected name (never signal a recycled pid)
owns() {
    local pid="$1" comm="$2"
    alive "$pid" && [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$comm"* ]]
}
wait_until() {  # wait_until SECONDS DESCRIPTION CMD...
    local limit="$1" what="$2"; shift 2
    local end=$(( $(date +%s) + limit ))
    until "$@" >/dev/null 2>&1; do
        (( $(date +%s) < end )) || die "timed out after ${limit}s waiting for $what"
        sleep 0.1
    done
}

need_root() { [[ $(id -u) -eq 0 ]] || die "must run as root (it starts munged, mariadbd and slurm daemons)"; }

cmd_install() {
    need_root
    if command -v sbatch >/dev/null && command -v slurmdbd >/dev/null && command -v munged >/dev/null \
        && command -v mariadbd >/dev/null && command -v victoria-metrics >/dev/null; then
        log "packages already installed"; return 0
    fi
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y slurm-wlm slurmdbd munge mariadb-server victoria-metrics curl
}

render_conf() {
    local cpus
    cpus=$(nproc)
    install -d -m 0755 "$CLUSTER_DIR/conf" "$CLUSTER_DIR/run" "$CLUSTER_DIR/log" "$CLUSTER_DIR/vm-data"
    sed -e "s|@CLUSTER_DIR@|$CLUSTER_DIR|g" -e "s|@CPUS@|$cpus|g" "$HERE/local-cluster/slurm.conf.in" >"$CLUSTER_DIR/conf/slurm.conf"
    sed -e "s|@CLUSTER_DIR@|$CLUSTER_DIR|g" "$HERE/local-cluster/slurmdbd.conf.in" >"$CLUSTER_DIR/conf/slurmdbd.conf"
    install -d -m 0755 /etc/slurm
    install -o root -g root -m 0644 "$CLUSTER_DIR/conf/slurm.conf" /etc/slurm/slurm.conf
    install -o slurm -g slurm -m 0600 "$CLUSTER_DIR/conf/slurmdbd.conf" /etc/slurm/slurmdbd.conf
}

start_munge() {
    install -d -o munge -g munge -m 0755 /run/munge   # pitfall 1: no systemd RuntimeDirectory
    if owns "$(pid_of /run/munge/munged.pid)" munged; then log "munged already running"; return; fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        mungekey --create && chown munge:munge /etc/munge/munge.key && chmod 0400 /etc/munge/munge.key
    fi
    runuser -u munge -- /usr/sbin/munged
    wait_until 10 "munge" bash -c 'munge -n | unmunge'
    log "munged up (pid $(pid_of /run/munge/munged.pid))"
}

start_mariadb() {
    install -d -o mysql -g root -m 0755 /run/mysqld
    if owns "$(pid_of /run/mysqld/mysqld.pid)" mariadbd; then
        log "mariadbd already running"
    else
        # pitfall 3: slurmdbd wants buffer pool >= 512M and lock wait >= 450 s
        setsid nohup /usr/sbin/mariadbd --user=mysql --pid-file=/run/mysqld/mysqld.pid \
            --innodb-buffer-pool-size=512M --innodb-lock-wait-timeout=900 \
            >>"$CLUSTER_DIR/log/mariadb.out" 2>&1 </dev/null &
        wait_until 60 "mariadbd" mariadb-admin ping
        log "mariadbd up (pid $(pid_of /run/mysqld/mysqld.pid))"
    fi
    if [[ "${FRESH:-0}" == 1 ]]; then
        mariadb -e "DROP DATABASE IF EXISTS slurm_acct_db;"
        rm -rf /var/lib/slurm/slurmctld/* /var/lib/slurm/slurmd/node1/* /var/lib/slurm/slurmd/node2/*
        log "FRESH: wiped slurm_acct_db and /var/lib/slurm/{slurmctld,slurmd}"
    fi
    mariadb -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db;
      CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'slurmdbpass';
      GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;"
}

start_slurmdbd() {
    if owns "$(pid_of "$CLUSTER_DIR/run/slurmdbd.pid")" slurmdbd; then log "slurmdbd already running"; return; fi
    /usr/sbin/slurmdbd
    wait_until 60 "slurmdbd" sacctmgr -n list cluster
    log "slurmdbd up (pid $(pid_of "$CLUSTER_DIR/run/slurmdbd.pid"))"
}

start_slurmctld() {
    if owns "$(pid_of "$CLUSTER_DIR/run/slurmctld.pid")" slurmctld; then log "slurmctld already running"; return; fi
    /usr/sbin/slurmctld
    wait_until 60 "slurmctld" bash -c 'scontrol ping | grep -q UP'
    log "slurmctld up (pid $(pid_of "$CLUSTER_DIR/run/slurmctld.pid"))"
}

# pitfall 7: after a restart sinfo shows recovered nodes idle before their slurmd registered;
# wait for a SlurmdStartTime at least the launch time instead.
node_registered() {
    local n="$1" since="$2" st
    st=$(scontrol show node "$n" | sed -n 's/.*SlurmdStartTime=\([^ ]*\).*/\1/p')
    [[ -n "$st" && "$st" != "None" ]] || return 1
    (( $(date -d "$st" +%s) >= since ))
}

start_slurmd() {
    local n since
    for n in node1 node2; do
        install -d -m 0755 "/var/lib/slurm/slurmd/$n"
        if owns "$(pid_of "$CLUSTER_DIR/run/slurmd-$n.pid")" slurmd; then log "slurmd $n already running"; continue; fi
        since=$(( $(date +%s) - 1 ))
        /usr/sbin/slurmd -N "$n"
        wait_until 60 "slurmd $n to register" node_registered "$n" "$since"
        # a node left DOWN/DRAINED by an earlier unclean stop comes back to service
        if scontrol show node "$n" | grep -qE 'State=[A-Z+]*(DOWN|DRAIN)'; then
            scontrol update NodeName="$n" State=RESUME || true
        fi
        log "slurmd $n up (pid $(pid_of "$CLUSTER_DIR/run/slurmd-$n.pid"))"
    done
    wait_until 30 "2 idle nodes" bash -c '[[ $(sinfo -h -N -t idle,mix,alloc -o %N | sort -u | wc -l) == 2 ]]'
}

vm_ready() { curl -fsS "http://$VM_ADDR/health" | grep -q OK; }

start_vm() {
    if owns "$(pid_of "$CLUSTER_DIR/run/victoria-metrics.pid")" victoria-metric; then log "victoria-metrics already running"; return; fi
    [[ "${FRESH:-0}" == 1 ]] && rm -rf "$CLUSTER_DIR/vm-data" && install -d -m 0755 "$CLUSTER_DIR/vm-data"
    # flags: /work/shared/notes/victoriametrics.md (long retention so old job windows are kept,
    # no latency offset so just-pushed samples are queryable); -fs.disableMmap: seed lesson 3.
    setsid nohup /usr/bin/victoria-metrics -storageDataPath="$CLUSTER_DIR/vm-data" -httpListenAddr="$VM_ADDR" \
        -retentionPeriod=100y -search.latencyOffset=0 -search.disableCache -fs.disableMmap \
        -search.maxPointsPerTimeseries=90000 \
        >>"$CLUSTER_DIR/log/victoria-metrics.log" 2>&1 </dev/null &
    echo $! >"$CLUSTER_DIR/run/victoria-metrics.pid"
    wait_until 30 "victoria-metrics on $VM_ADDR" vm_ready
    log "victoria-metrics up on $VM_ADDR (pid $(pid_of "$CLUSTER_DIR/run/victoria-metrics.pid"))"
}

cmd_start() {
    need_root
    command -v slurmctld >/dev/null || die "slurm is not installed: run '$0 install' first"
    render_conf
    install -d -o slurm -g slurm -m 0755 /var/lib/slurm/slurmctld /var/log/slurm
    start_munge
    start_mariadb
    start_slurmdbd
    start_slurmctld
    start_slurmd
    if command -v victoria-metrics >/dev/null && [[ "${AI4S_NO_VM:-0}" != 1 ]]; then start_vm; fi
    sinfo
    log "cluster ready (dir $CLUSTER_DIR)"
}

# stop one daemon by pid file: TERM, wait up to 30 s, then KILL
stop_pidfile() {
    local pidfile="$1" comm="$2" pid end
    pid=$(pid_of "$pidfile")
    if ! owns "$pid" "$comm"; then return 0; fi
    kill -TERM "$pid" 2>/dev/null || true
    end=$(( $(date +%s) + 30 ))
    while alive "$pid"; do
        if (( $(date +%s) >= end )); then kill -KILL "$pid" 2>/dev/null || true; break; fi
        sleep 0.1
    done
    log "stopped $comm (pid $pid)"
}

cmd_stop() {
    need_root
    if [[ "${KEEP_JOBS:-0}" != 1 ]] && owns "$(pid_of "$CLUSTER_DIR/run/slurmctld.pid")" slurmctld; then
        squeue -h -o %A | xargs -r scancel || true
        local end=$(( $(date +%s) + 30 ))
        while [[ -n "$(squeue -h -o %A 2>/dev/null)" ]] || compgen -G "/var/lib/slurm/slurmd/node*/*_*" >/dev/null; do
            (( $(date +%s) < end )) || { log "jobs still listed after 30 s; stopping anyway"; break; }
            sleep 0.2
        done
    fi
    stop_pidfile "$CLUSTER_DIR/run/victoria-metrics.pid" victoria-metric
    stop_pidfile "$CLUSTER_DIR/run/slurmd-node1.pid" slurmd
    stop_pidfile "$CLUSTER_DIR/run/slurmd-node2.pid" slurmd
    stop_pidfile "$CLUSTER_DIR/run/slurmctld.pid" slurmctld
    stop_pidfile "$CLUSTER_DIR/run/slurmdbd.pid" slurmdbd
    stop_pidfile /run/mysqld/mysqld.pid mariadbd
    stop_pidfile /run/munge/munged.pid munged
    log "cluster stopped"
}

cmd_status() {
    local rc=0 line
    for line in "munged:/run/munge/munged.pid" "mariadbd:/run/mysqld/mysqld.pid" \
                "slurmdbd:$CLUSTER_DIR/run/slurmdbd.pid" "slurmctld:$CLUSTER_DIR/run/slurmctld.pid" \
                "slurmd:$CLUSTER_DIR/run/slurmd-node1.pid" "slurmd:$CLUSTER_DIR/run/slurmd-node2.pid" \
                "victoria-metric:$CLUSTER_DIR/run/victoria-metrics.pid"; do
        local comm="${line%%:*}" pf="${line#*:}" pid
        pid=$(pid_of "$pf")
        if owns "$pid" "$comm"; then echo "up    $comm pid=$pid ($pf)"; else echo "down  $comm ($pf)"; rc=3; fi
    done
    if [[ $rc -eq 0 ]]; then sinfo; echo "victoria-metrics: http://$VM_ADDR"; fi
    return $rc
}

case "${1:-}" in
    install) cmd_install ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: $0 install|start|stop|status   (env: AI4S_CLUSTER_DIR, FRESH=1, KEEP_JOBS=1)" >&2; exit 2 ;;
esac
