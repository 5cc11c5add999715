#!/usr/bin/env bash
# A throw-away Slurm cluster on one machine, for optsched's Slurm adapter, its tests and demos.
#
#   scripts/slurm-dev-cluster.sh up     [DIR]   start munge, slurmctld and four slurmd (n1..n4)
#   scripts/slurm-dev-cluster.sh down   DIR     stop exactly the processes `up` started in DIR
#   scripts/slurm-dev-cluster.sh status DIR     which of them run, and the nodes as sinfo sees them
#   scripts/slurm-dev-cluster.sh env    DIR     print the `export ...` lines again
#
# Everything lives under DIR (default: a fresh temporary folder): its own munge key, socket and
# pid file (the system's munge is not touched), slurm.conf, gres.conf, cgroup.conf,
# job_submit.lua, state, spool, logs, pid files and the fake GPU device files. Ports are picked
# free on 127.0.0.1 at each `up`. Nodes: n1,n2 with gpu:a100:8, n3,n4 with gpu:v100:8, each GPU
# also split into 4 shards (gres/shard: --gres=shard:N takes N quarters of one GPU), 16 CPUs
# and 64 GB each (SlurmdParameters=config_overrides: the machine may have 2 cores). Partitions
# a, b, c (default a) each span all four nodes; accounts are free text (there is no slurmdbd).
# topology.conf: switches s1 (n1,n2) and s2 (n3,n4) under switch top (see SWITCHES).
#
# Environment:
#   GATE=on|off       on (default): job_submit.lua sets priority 0 on every job, so Slurm starts
#                     nothing by itself and an external policy starts jobs with
#                     `scontrol update JobId=X ReqNodeList=... StartTime=now; scontrol release X`.
#                     off: no job_submit plugin; Slurm's own scheduler (sched/builtin) runs jobs.
#   SWITCHES="s1:n1,n2 s2:n3,n4"  the leaf switches of topology.conf (that default), each
#                     SWITCH:NODES; one top switch joins them (TopologyPlugin=topology/tree).
#   SITE="prod:2 research:2 batch:1 dev:1"  (with GATE=off) Slurm configured as a site would:
#                     sched/backfill, priority/multifactor (age and partition), one partition per
#                     NAME:TIER over all nodes (PriorityTier TIER; the first is the default) and
#                     PreemptType=preempt/partition_prio with PreemptMode=REQUEUE: a job of a
#                     higher tier requeues jobs of lower ones. Unset: sched/builtin, partitions a b c.
#   DBD=on|off        on (with SITE; default off): accounting through slurmdbd on a private
#                     MariaDB. `up` starts mariadbd (its own datadir, socket and port under
#                     DIR/mysql, made once with mariadb-install-db) and slurmdbd (DIR/etc/
#                     slurmdbd.conf, mode 600, accounting_storage/mysql); slurmctld then runs with
#                     AccountingStorageType=accounting_storage/slurmdbd,
#                     AccountingStorageEnforce=associations,limits,qos and
#                     AccountingStorageTRES=gres/gpu. In the database: the cluster, one account
#                     per SITE partition, this user in each of them (the first is the default)
#                     and the QOS of GPU_LIMITS.
#   GPU_LIMITS="prod:12 research:8"  (with DBD=on) one QOS per NAME:GPUS, named NAME, with
#                     GrpTRES=gres/gpu=GPUS, attached to partition NAME as its partition QOS: the
#                     jobs running in that partition hold at most GPUS GPUs together; a job that
#                     would pass it stays pending (reason QOSGrpGRES). A partition not named has
#                     no limit. Jobs of shards (gres/shard) are not counted.
#   UP_TIMEOUT=S      seconds to wait for the four nodes to be idle (default 60).
#   SLURM_DEV_QUIET=1 `up` prints only the export lines.
#   WATCH_PID=PID     `up` also starts a watchdog that runs `down DIR` once process PID is gone
#                     (the test fixture passes its own pid: a killed test run leaves no cluster).
#
# Needs with DBD=on: mariadbd, mariadb-install-db, mariadb, mariadb-admin, slurmdbd, sacctmgr
# (Debian: apt-get install -y mariadb-server slurmdbd). `down` stops mariadbd and slurmdbd too.
#
# `up` on a DIR whose cluster is running prints the export lines and changes nothing; on a DIR
# whose cluster is partly running it stops what is left and starts it all again (state kept).
# Runs without systemd; made for root (device nodes need mknod), as CI runs.
set -euo pipefail

NODES=(n1 n2 n3 n4)
declare -A GPU_TYPE=([n1]=a100 [n2]=a100 [n3]=v100 [n4]=v100)
GPUS_PER_NODE=8
CPUS_PER_NODE=16
MEM_PER_NODE=64000
PARTITIONS=(a b c)
SHARDS_PER_GPU=4
# Network topology (topology/tree): leaf switches (SWITCHES, default s1 over n1,n2 and s2 over
# n3,n4) under one top switch.
TOP_SWITCH=top

die() { echo "slurm-dev-cluster: error: $*" >&2; exit 1; }
say() { [[ "${SLURM_DEV_QUIET:-0}" == 1 ]] || echo "slurm-dev-cluster: $*" >&2; }

# SITE: one partition per NAME:TIER, in place of a b c.
declare -A TIER=()
if [[ -n "${SITE:-}" ]]; then
    PARTITIONS=()
    for _p in $SITE; do
        [[ "$_p" =~ ^[A-Za-z0-9_]+:[0-9]+$ ]] || die "SITE: '$_p' is not PARTITION:TIER (e.g. prod:2)"
        PARTITIONS+=("${_p%%:*}")
        TIER[${_p%%:*}]=${_p#*:}
    done
    unset _p
fi

# GPU_LIMITS (with DBD=on): NAME:GPUS, the GrpTRES of partition NAME's QOS.
declare -A GPU_LIMIT=()
for _l in ${GPU_LIMITS:-}; do
    [[ "$_l" =~ ^[A-Za-z0-9_]+:[0-9]+$ ]] || die "GPU_LIMITS: '$_l' is not PARTITION:GPUS (e.g. prod:12)"
    GPU_LIMIT[${_l%%:*}]=${_l#*:}
done
unset _l
DB_NAME=slurm_acct_db
DB_USER=slurm

usage() {
    sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}

# need_bins PACKAGES BINARY...: fail naming the missing binaries and the Debian packages.
need_bins() {
    local packages=$1 missing=() b
    shift
    for b in "$@"; do command -v "$b" >/dev/null 2>&1 || missing+=("$b"); done
    if ((${#missing[@]})); then
        die "missing binaries: ${missing[*]} (Debian: apt-get install -y $packages)"
    fi
}

# pid_of NAME: the pid recorded in DIR/run/NAME.pid if that process is alive and was started
# with this DIR on its command line (a recycled pid is never ours); empty otherwise.
pid_of() {
    local f="$DIR/run/$1.pid" pid
    [[ -s "$f" ]] || return 0
    pid=$(tr -dc '0-9' <"$f")
    [[ -n "$pid" && -r "/proc/$pid/cmdline" ]] || return 0
    # A zombie (no init reaps daemons here) has an empty cmdline, so it is not alive either.
    if tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$DIR/"; then echo "$pid"; fi
}

# running PID: the process exists and is not a zombie.
running() {
    local st
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [[ -n "$st" && "$st" != Z ]]
}

# dbd_on: whether this cluster runs accounting (DBD=on at `up`; DIR/etc/dbd afterwards).
dbd_on() {
    if [[ -n "${DBD_UP:-}" ]]; then [[ "$DBD_UP" == on ]]; else [[ "$(cat "$DIR/etc/dbd" 2>/dev/null)" == on ]]; fi
}

daemons() {
    echo munged
    if dbd_on; then echo mariadbd slurmdbd; fi
    echo slurmctld
    local n
    for n in "${NODES[@]}"; do echo "slurmd-$n"; done
}

# free_ports N: N distinct TCP ports free on 127.0.0.1 right now.
free_ports() {
    if command -v python3 >/dev/null 2>&1; then
        python3 - "$1" <<'EOF'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
print(" ".join(str(s.getsockname()[1]) for s in socks))
EOF
        return
    fi
    # No python3: try random ports in a high range that nothing listens on (/proc/net/tcp*).
    local used out=() p
    used=$(awk 'NR>1 {split($2,a,":"); print strtonum("0x" a[2])}' /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u)
    while ((${#out[@]} < $1)); do
        p=$((20000 + RANDOM % 20000))
        grep -qx "$p" <<<"$used" && continue
        [[ " ${out[*]} " == *" $p "* ]] && continue
        out+=("$p")
    done
    echo "${out[*]}"
}

print_env() {
    echo "export SLURM_CONF=$DIR/etc/slurm.conf"
    echo "export SLURM_DEV_CLUSTER_DIR=$DIR"
}

logs_tail() {
    local f
    if [[ -n "$(pid_of slurmctld)" ]]; then
        echo "---- sinfo (node, state, reason)" >&2
        SLURM_CONF="$DIR/etc/slurm.conf" sinfo -h -N -p "${PARTITIONS[0]}" -o '%N %t %E' >&2 2>/dev/null || true
    fi
    for f in "$DIR"/log/*.log; do
        [[ -s "$f" ]] || continue
        echo "---- ${f#"$DIR"/} (last 15 lines)" >&2
        tail -n 15 "$f" >&2
    done
}

write_config() {
    local ports ctld_port dbd_port db_port i n t user gate="${GATE:-on}"
    read -r -a ports <<<"$(free_ports $((3 + ${#NODES[@]})))"
    ctld_port=${ports[0]}
    dbd_port=${ports[$((1 + ${#NODES[@]}))]}
    db_port=${ports[$((2 + ${#NODES[@]}))]}
    user=$(id -un)

    mkdir -p "$DIR"/{etc,state,log,run,dev} "$DIR/munge"
    chmod 0755 "$DIR" "$DIR/etc" "$DIR/run"
    # munged wants execute-for-all on every folder above its socket, and no write for others.
    chmod 0711 "$DIR/munge"
    chmod 0700 "$DIR/state"
    mkdir -p "$DIR/munge/sock" && chmod 0711 "$DIR/munge/sock"

    # Fake GPUs: slurmd 22.05 drops a gres without File=, and File= must name a device node.
    for n in "${NODES[@]}"; do
        mkdir -p "$DIR/dev/$n" "$DIR/spool/$n"
        for ((i = 0; i < GPUS_PER_NODE; i++)); do
            [[ -c "$DIR/dev/$n/nvidia$i" ]] && continue
            rm -f "$DIR/dev/$n/nvidia$i"
            mknod "$DIR/dev/$n/nvidia$i" c 1 3 2>/dev/null ||
                die "cannot mknod $DIR/dev/$n/nvidia$i (fake GPU device files need root or CAP_MKNOD)"
        done
    done

    {
        echo "# Written by scripts/slurm-dev-cluster.sh; rewritten at every 'up'."
        echo "ClusterName=optsched-dev"
        echo "SlurmctldHost=localhost(127.0.0.1)"
        echo "SlurmctldPort=$ctld_port"
        echo "SlurmUser=$user"
        echo "SlurmdUser=$user"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "AuthInfo=socket=$DIR/munge/sock/munge.socket"
        echo "StateSaveLocation=$DIR/state"
        echo "SlurmdSpoolDir=$DIR/spool/%n"
        echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
        echo "SlurmdPidFile=$DIR/run/slurmd-%n.pid"
        echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
        echo "SlurmdLogFile=$DIR/log/slurmd-%n.log"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        echo "SlurmdParameters=config_overrides"
        echo "ProctrackType=proctrack/linuxproc"
        echo "TaskPlugin=task/none"
        echo "JobAcctGatherType=jobacct_gather/none"
        if dbd_on; then
            # Accounting through slurmdbd: associations (account, user) must exist, and the
            # QOS limits hold. gres/gpu is tracked, so GrpTRES=gres/gpu=N can limit it.
            echo "AccountingStorageType=accounting_storage/slurmdbd"
            echo "AccountingStorageHost=127.0.0.1"
            echo "AccountingStoragePort=$dbd_port"
            # The munge socket for slurmdbd connections (AuthInfo covers only the others).
            echo "AccountingStoragePass=$DIR/munge/sock/munge.socket"
            echo "AccountingStorageEnforce=associations,limits,qos"
            echo "AccountingStorageTRES=gres/gpu"
        else
            echo "AccountingStorageType=accounting_storage/none"
        fi
        echo "JobCompType=jobcomp/filetxt"
        echo "JobCompLoc=$DIR/log/jobcomp.txt"
        if [[ -n "${SITE:-}" ]]; then
            # A site's setup: backfill every second, priorities by partition tier and age, and
            # partition-priority preemption that requeues the lower tier's jobs.
            echo "SchedulerType=sched/backfill"
            echo "SchedulerParameters=batch_sched_delay=0,bf_interval=1,bf_resolution=1,bf_continue"
            echo "PriorityType=priority/multifactor"
            echo "PriorityWeightPartition=10000"
            echo "PriorityWeightAge=1000"
            echo "PriorityMaxAge=00:10:00"
            echo "PreemptType=preempt/partition_prio"
            echo "PreemptMode=REQUEUE"
            echo "JobRequeue=1"
        else
            echo "SchedulerType=sched/builtin"
            echo "SchedulerParameters=batch_sched_delay=0"
        fi
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_CPU" # memory not consumable: jobs share nodes by CPU and GPU
        echo "GresTypes=gpu,shard"
        echo "TopologyPlugin=topology/tree"
        echo "MailProg=/bin/true"
        echo "MpiDefault=none"
        echo "ReturnToService=2"
        echo "SlurmctldTimeout=30"
        echo "SlurmdTimeout=60"
        echo "InactiveLimit=0"
        echo "KillWait=2"
        echo "MinJobAge=300"
        echo "Waittime=0"
        echo "PlugStackConfig=$DIR/etc/plugstack.conf"
        if [[ "$gate" == on ]]; then echo "JobSubmitPlugins=lua"; fi
        for ((i = 0; i < ${#NODES[@]}; i++)); do
            n=${NODES[$i]}
            t=${GPU_TYPE[$n]}
            echo "NodeName=$n NodeHostname=localhost NodeAddr=127.0.0.1 Port=${ports[$((i + 1))]}" \
                "CPUs=$CPUS_PER_NODE RealMemory=$MEM_PER_NODE" \
                "Gres=gpu:$t:$GPUS_PER_NODE,shard:$((GPUS_PER_NODE * SHARDS_PER_GPU)) State=UNKNOWN"
        done
        for ((i = 0; i < ${#PARTITIONS[@]}; i++)); do
            local default=NO
            ((i == 0)) && default=YES
            local qos=""
            if dbd_on && [[ -n "${GPU_LIMIT[${PARTITIONS[$i]}]:-}" ]]; then qos="QOS=${PARTITIONS[$i]}"; fi
            echo "PartitionName=${PARTITIONS[$i]} Nodes=ALL Default=$default MaxTime=INFINITE State=UP" \
                "${TIER[${PARTITIONS[$i]}]:+PriorityTier=${TIER[${PARTITIONS[$i]}]}}" $qos
        done
    } >"$DIR/etc/slurm.conf.new"
    mv "$DIR/etc/slurm.conf.new" "$DIR/etc/slurm.conf"

    {
        for n in "${NODES[@]}"; do
            echo "NodeName=$n Name=gpu Type=${GPU_TYPE[$n]} File=$DIR/dev/$n/nvidia[0-$((GPUS_PER_NODE - 1))]"
            # Shards: SHARDS_PER_GPU on each GPU (Count is spread evenly over the files).
            echo "NodeName=$n Name=shard Count=$((GPUS_PER_NODE * SHARDS_PER_GPU))" \
                "File=$DIR/dev/$n/nvidia[0-$((GPUS_PER_NODE - 1))]"
        done
    } >"$DIR/etc/gres.conf"

    {
        local sw leaves=()
        for sw in ${SWITCHES:-s1:n1,n2 s2:n3,n4}; do
            [[ "$sw" =~ ^[A-Za-z0-9_]+:[A-Za-z0-9_,]+$ ]] || die "SWITCHES: '$sw' is not SWITCH:NODE,NODE"
            echo "SwitchName=${sw%%:*} Nodes=${sw#*:}"
            leaves+=("${sw%%:*}")
        done
        echo "SwitchName=$TOP_SWITCH Switches=$(IFS=,; echo "${leaves[*]}")"
    } >"$DIR/etc/topology.conf"

    # slurmd 22.05 dies on cgroup detection without this, even with proctrack/task not cgroup.
    echo "CgroupPlugin=cgroup/v1" >"$DIR/etc/cgroup.conf"
    : >"$DIR/etc/plugstack.conf"

    cat >"$DIR/etc/job_submit.lua" <<'EOF'
-- optsched's gate: every job is held at submission (priority 0), so Slurm never starts a job
-- by itself. The policy starts a job by pinning its nodes and releasing it:
--   scontrol update JobId=X NumNodes=K ReqNodeList=n1,n2 StartTime=now; scontrol release X
-- and preempts one with `scontrol requeuehold X` (back to held, GPUs freed).
function slurm_job_submit(job_desc, part_list, submit_uid)
    job_desc.priority = 0
    return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
    return slurm.SUCCESS
end
EOF
    echo "$gate" >"$DIR/etc/gate"
    if dbd_on; then echo on; else echo off; fi >"$DIR/etc/dbd"
    if dbd_on; then write_dbd_config "$user" "$dbd_port" "$db_port"; fi
}

# write_dbd_config USER DBD_PORT DB_PORT: slurmdbd.conf (mode 600: it holds the database
# password, fresh at every `up`) and the folders of the private MariaDB.
write_dbd_config() {
    local user=$1 dbd_port=$2 db_port=$3
    mkdir -p "$DIR/mysql/data" "$DIR/mysql/tmp"
    chmod 0700 "$DIR/mysql"
    echo "$db_port" >"$DIR/mysql/port"
    DB_PASS=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    (
        umask 077
        {
            echo "# Written by scripts/slurm-dev-cluster.sh; rewritten at every 'up'."
            echo "AuthType=auth/munge"
            echo "AuthInfo=socket=$DIR/munge/sock/munge.socket"
            # slurmdbd runs only where DbdHost is this machine's name; it listens on DbdAddr.
            echo "DbdHost=$(hostname -s)"
            echo "DbdAddr=127.0.0.1"
            echo "DbdPort=$dbd_port"
            echo "SlurmUser=$user"
            echo "DebugLevel=info"
            echo "LogFile=$DIR/log/slurmdbd.log"
            echo "PidFile=$DIR/run/slurmdbd.pid"
            echo "StorageType=accounting_storage/mysql"
            echo "StorageHost=127.0.0.1"
            echo "StoragePort=$db_port"
            echo "StorageUser=$DB_USER"
            echo "StoragePass=$DB_PASS"
            echo "StorageLoc=$DB_NAME"
        } >"$DIR/etc/slurmdbd.conf.new"
    )
    chmod 0600 "$DIR/etc/slurmdbd.conf.new"
    mv "$DIR/etc/slurmdbd.conf.new" "$DIR/etc/slurmdbd.conf"
}

start_munge() {
    if [[ ! -s "$DIR/munge/munge.key" ]]; then
        if command -v mungekey >/dev/null 2>&1; then
            mungekey --create --keyfile="$DIR/munge/munge.key" >/dev/null
        else
            dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
        fi
    fi
    chmod 0400 "$DIR/munge/munge.key"
    # --force: the folder may sit under a private (0700) one, e.g. pytest's tmp; munged then only
    # warns that other users could not reach the socket (our clients run as the same user).
    munged --key-file="$DIR/munge/munge.key" \
        --socket="$DIR/munge/sock/munge.socket" \
        --pid-file="$DIR/run/munged.pid" \
        --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed" \
        --num-threads=2 --force >>"$DIR/log/munged.log" 2>&1 ||
        { logs_tail; die "munged did not start"; }
}

mariadb_client() { mariadb --no-defaults --socket="$DIR/mysql/mysqld.sock" -u root "$@"; }

# The private MariaDB: its data folder is made once (mariadb-install-db); mariadbd then runs
# directly (no systemd, no /etc/mysql: --no-defaults), on 127.0.0.1 only, and the database user
# slurmdbd logs in as gets this `up`'s password.
start_mariadb() {
    local user
    user=$(id -un)
    if [[ ! -d "$DIR/mysql/data/mysql" ]]; then
        say "creating the MariaDB data folder (once)"
        mariadb-install-db --no-defaults --user="$user" --datadir="$DIR/mysql/data" \
            --auth-root-authentication-method=socket --skip-test-db >>"$DIR/log/mariadb-install.log" 2>&1 ||
            { tail -n 20 "$DIR/log/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
    fi
    # setsid and no inherited pipes: it outlives `up`, and a caller reading our output is not
    # kept waiting. The --datadir on its command line is how pid_of knows it is ours.
    setsid mariadbd --no-defaults --user="$user" --datadir="$DIR/mysql/data" \
        --socket="$DIR/mysql/mysqld.sock" --port="$(cat "$DIR/mysql/port")" --bind-address=127.0.0.1 \
        --skip-name-resolve --pid-file="$DIR/run/mariadbd.pid" --log-error="$DIR/log/mariadbd.log" \
        --tmpdir="$DIR/mysql/tmp" --skip-log-bin --innodb-buffer-pool-size=64M \
        --innodb-lock-wait-timeout=900 </dev/null >>"$DIR/log/mariadbd.log" 2>&1 &
    echo $! >"$DIR/run/mariadbd.pid"
}

setup_database() {
    mariadb_client <<EOF || die "could not set up the database user (log: $DIR/log/mariadbd.log)"
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
ALTER USER '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';
EOF
}

# slurmdbd has no option for its configuration: it reads slurmdbd.conf next to SLURM_CONF. It
# is run through a link under DIR, so its command line names DIR (pid_of).
start_slurmdbd() {
    ln -sfn "$(command -v slurmdbd)" "$DIR/run/slurmdbd"
    "$DIR/run/slurmdbd" >>"$DIR/log/slurmdbd.log" 2>&1 </dev/null || { logs_tail; die "slurmdbd did not start"; }
}

sacct_mgr() { sacctmgr -i "$@"; }

# The cluster, one account per partition, this user in every account (the first one its
# default), and one QOS per GPU_LIMITS entry (its limit is set once slurmctld has registered
# gres/gpu: set_qos_limits). Only what is missing is added, so a second `up` adds nothing.
seed_accounts() {
    local user have p
    user=$(id -un)
    have=$(sacctmgr -n -P show cluster format=cluster)
    grep -qx optsched-dev <<<"$have" || sacct_mgr add cluster optsched-dev >/dev/null
    have=$(sacctmgr -n -P show account format=account)
    for p in "${PARTITIONS[@]}"; do
        grep -qx "$p" <<<"$have" || sacct_mgr add account "$p" cluster=optsched-dev \
            description="tenant $p" organization=optsched >/dev/null
    done
    have=$(sacctmgr -n -P show qos format=name)
    for p in "${!GPU_LIMIT[@]}"; do
        grep -qx "$p" <<<"$have" || sacct_mgr add qos "$p" >/dev/null
    done
    have=$(sacctmgr -n -P show assoc format=account,user where user="$user")
    for p in "${PARTITIONS[@]}"; do
        grep -qx "$p|$user" <<<"$have" || sacct_mgr add user "$user" account="$p" cluster=optsched-dev \
            defaultaccount="${PARTITIONS[0]}" >/dev/null
    done
}

gres_gpu_tracked() { sacctmgr -n -P show tres format=type,name | grep -qx 'gres|gpu'; }

qos_limits_in_ctld() {
    local p
    for p in "${!GPU_LIMIT[@]}"; do
        scontrol show assoc_mgr flags=qos qos="$p" | grep -q "GrpTRES=.*gres/gpu=${GPU_LIMIT[$p]}(" || return 1
    done
}

set_qos_limits() {
    local p
    for p in "${!GPU_LIMIT[@]}"; do
        sacct_mgr modify qos "$p" set GrpTRES="gres/gpu=${GPU_LIMIT[$p]}" >/dev/null
    done
}

# wait_for WHAT SECONDS COMMAND...: poll COMMAND every 0.1 s; fail at once (with the logs'
# tail) when a daemon named in WATCH has died, and after SECONDS.
WATCH=()
wait_for() {
    local what=$1 secs=$2 deadline name
    shift 2
    deadline=$((SECONDS + secs))
    until "$@" >/dev/null 2>&1; do
        for name in "${WATCH[@]}"; do
            if [[ -s "$DIR/run/$name.pid" && -z "$(pid_of "$name")" ]]; then
                logs_tail
                die "$name exited while waiting for $what (logs above; all under $DIR/log)"
            fi
        done
        if ((SECONDS >= deadline)); then
            logs_tail
            die "timed out after ${secs}s waiting for $what (logs above; all under $DIR/log)"
        fi
        sleep 0.1
    done
}

nodes_idle() {
    local out
    out=$(sinfo -h -N -p "${PARTITIONS[0]}" -o '%N %t' 2>/dev/null) || return 1
    [[ $(grep -cE '^n[0-9]+ idle$' <<<"$out") -eq ${#NODES[@]} ]]
}

alive() { [[ -n "$(pid_of "$1")" ]]; }

# Job step daemons (slurmstepd) that slurmd of this DIR forked: their working folder or an open
# file lies under DIR. They outlive slurmd, so `down` ends them (and what they run) itself.
stepds_of_dir() {
    local p f
    for p in /proc/[0-9]*; do
        [[ "$(cat "$p/comm" 2>/dev/null)" == slurmstepd ]] || continue
        for f in "$p/cwd" "$p"/fd/*; do
            if [[ "$(readlink "$f" 2>/dev/null)" == "$DIR/"* ]]; then
                echo "${p#/proc/}"
                break
            fi
        done
    done
}

stop_all() {
    local name pid pids=() left jobs stepds kids
    # Cancel the cluster's jobs while the controller runs, so their steps end cleanly.
    if [[ -n "$(pid_of slurmctld)" ]]; then
        jobs=$(SLURM_CONF="$DIR/etc/slurm.conf" squeue -h -o %i 2>/dev/null | tr '\n' ' ') || jobs=""
        if [[ -n "${jobs// /}" ]]; then
            say "cancelling jobs: $jobs"
            # shellcheck disable=SC2086
            SLURM_CONF="$DIR/etc/slurm.conf" scancel $jobs 2>/dev/null || true
            for _ in $(seq 1 30); do
                [[ -z "$(stepds_of_dir)" ]] && break
                sleep 0.1
            done
        fi
    fi
    # slurmd first, the controller next, then slurmdbd and its database, munge last: each still
    # has what it needs to shut down.
    for name in watchdog "${NODES[@]/#/slurmd-}" slurmctld slurmdbd mariadbd munged; do
        pid=$(pid_of "$name")
        [[ -n "$pid" && "$pid" != "$$" ]] || continue
        kill -TERM "$pid" 2>/dev/null || true
        pids+=("$pid")
        say "stopping $name (pid $pid)"
    done
    stepds=$(stepds_of_dir)
    for pid in $stepds; do
        kids=$(pgrep -P "$pid" || true)
        say "stopping slurmstepd (pid $pid) and what it runs (${kids:-nothing})"
        # shellcheck disable=SC2086
        kill -TERM $kids 2>/dev/null || true
        kill -KILL "$pid" 2>/dev/null || true
        pids+=("$pid")
    done
    ((${#pids[@]})) || return 0
    for _ in $(seq 1 100); do
        left=()
        for pid in "${pids[@]}"; do running "$pid" && left+=("$pid"); done
        ((${#left[@]})) || return 0
        sleep 0.1
    done
    for pid in "${left[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    say "killed (SIGKILL) pids still running after 10 s: ${left[*]}"
}

# A failed `up` stops what it started before exiting, so no half cluster is left behind.
STARTING=0
on_exit() {
    local rc=$?
    if ((rc != 0 && STARTING)); then
        STARTING=0
        say "up failed: stopping what it started in $DIR"
        stop_all || true
    fi
    exit "$rc"
}
trap on_exit EXIT

cmd_up() {
    need_bins "slurmctld slurmd slurm-client munge" munged slurmctld slurmd sinfo scontrol squeue sbatch scancel mknod
    [[ "${GATE:-on}" == on || "${GATE:-on}" == off ]] || die "GATE must be on or off, not '${GATE}'"
    [[ -z "${SITE:-}" || "${GATE:-on}" == off ]] || die "SITE needs GATE=off (Slurm schedules by itself)"
    DBD_UP=${DBD:-off}
    [[ "$DBD_UP" == on || "$DBD_UP" == off ]] || die "DBD must be on or off, not '$DBD_UP'"
    [[ "$DBD_UP" == off || -n "${SITE:-}" ]] || die "DBD=on needs SITE (one account per partition)"
    [[ -z "${GPU_LIMITS:-}" || "$DBD_UP" == on ]] || die "GPU_LIMITS needs DBD=on (QOS limits live in slurmdbd)"
    local p
    for p in "${!GPU_LIMIT[@]}"; do
        [[ -n "${TIER[$p]:-}" ]] || die "GPU_LIMITS: '$p' is not a SITE partition"
    done
    if [[ "$DBD_UP" == on ]]; then
        need_bins "mariadb-server slurmdbd" slurmdbd sacctmgr mariadbd mariadb-install-db mariadb mariadb-admin
    fi
    local running=0 total=0 name n
    if [[ -z "${DIR:-}" ]]; then
        DIR=$(mktemp -d "${TMPDIR:-/tmp}/optsched-slurm.XXXXXX")
    fi
    mkdir -p "$DIR"
    DIR=$(cd "$DIR" && pwd -P)
    export SLURM_CONF="$DIR/etc/slurm.conf"
    for name in $(daemons); do
        total=$((total + 1))
        alive "$name" && running=$((running + 1))
    done
    if ((running == total)) && nodes_idle_or_busy; then
        say "already running in $DIR"
        print_env
        return 0
    fi
    if ((running > 0)); then
        say "partly running in $DIR ($running of $total daemons): restarting all"
        stop_all
    fi
    STARTING=1
    write_config
    rm -f "$DIR"/run/*.pid # stale ones would read as "exited" below
    WATCH=()
    start_munge
    WATCH=(munged)
    wait_for "the munge socket" 10 test -S "$DIR/munge/sock/munge.socket"
    if dbd_on; then
        start_mariadb
        WATCH+=(mariadbd)
        wait_for "mariadbd to answer" 60 mariadb-admin --no-defaults --socket="$DIR/mysql/mysqld.sock" -u root ping
        setup_database
        start_slurmdbd
        WATCH+=(slurmdbd)
        wait_for "slurmdbd to answer" 120 sacctmgr -n show cluster
        seed_accounts
    fi
    # -f names DIR on each daemon's command line: that is how pid_of tells ours from others.
    slurmctld -f "$SLURM_CONF" >>"$DIR/log/slurmctld.log" 2>&1 || { logs_tail; die "slurmctld did not start"; }
    WATCH+=(slurmctld)
    wait_for "slurmctld to answer" 30 scontrol ping
    for n in "${NODES[@]}"; do
        slurmd -f "$SLURM_CONF" -N "$n" >>"$DIR/log/slurmd-$n.log" 2>&1 || { logs_tail; die "slurmd -N $n did not start"; }
        WATCH+=("slurmd-$n")
    done
    wait_for "four idle nodes (sinfo)" "${UP_TIMEOUT:-60}" nodes_idle
    if dbd_on && ((${#GPU_LIMIT[@]})); then
        # gres/gpu is a TRES of the database once slurmctld has registered it.
        wait_for "slurmctld to register gres/gpu with slurmdbd" 30 gres_gpu_tracked
        set_qos_limits
        wait_for "slurmctld to hold the QOS limits" 30 qos_limits_in_ctld
    fi
    STARTING=0
    if [[ -n "${WATCH_PID:-}" ]]; then
        [[ "$WATCH_PID" =~ ^[0-9]+$ ]] || die "WATCH_PID must be a process id, not '$WATCH_PID'"
        # Detached, with no inherited pipes: a caller reading our output is not kept waiting.
        setsid bash "$0" _watch "$DIR/" "$WATCH_PID" </dev/null >>"$DIR/log/watchdog.log" 2>&1 &
        echo $! >"$DIR/run/watchdog.pid"
    fi
    say "up in $DIR: nodes ${NODES[*]}, partitions ${PARTITIONS[*]}, gate $(cat "$DIR/etc/gate"), dbd $(cat "$DIR/etc/dbd")"
    print_env
}

# True when sinfo answers with all four nodes in any state but down/unknown.
nodes_idle_or_busy() {
    local out
    out=$(sinfo -h -N -p "${PARTITIONS[0]}" -o '%N %t' 2>/dev/null) || return 1
    [[ $(grep -cvE ' (down|unk|drain|fail|futr)' <<<"$out") -eq ${#NODES[@]} ]]
}

cmd_down() {
    [[ -n "${DIR:-}" ]] || die "down needs the cluster's DIR"
    [[ -d "$DIR" ]] || die "no such folder: $DIR"
    DIR=$(cd "$DIR" && pwd -P)
    stop_all
    say "stopped (files kept in $DIR)"
}

cmd_status() {
    [[ -n "${DIR:-}" ]] || die "status needs the cluster's DIR"
    [[ -d "$DIR" ]] || die "no such folder: $DIR"
    DIR=$(cd "$DIR" && pwd -P)
    local name pid up=0 total=0
    for name in $(daemons); do
        total=$((total + 1))
        pid=$(pid_of "$name")
        if [[ -n "$pid" ]]; then
            echo "$name running (pid $pid)"
            up=$((up + 1))
        else
            echo "$name stopped"
        fi
    done
    if ((up > 0)) && command -v sinfo >/dev/null 2>&1; then
        SLURM_CONF="$DIR/etc/slurm.conf" sinfo -N -o '%N %P %t %G' || true
    fi
    ((up == total))
}

# _watch DIR/ PID: wait until PID has ended, then stop the cluster (internal, see WATCH_PID).
cmd_watch() {
    local pid=$1
    while running "$pid"; do sleep 1; done
    say "watched process $pid is gone: stopping the cluster"
    cmd_down
}

[[ $# -ge 1 ]] || usage
action=$1
DIR=${2:-}
case "$action" in
up) cmd_up ;;
down) cmd_down ;;
status) cmd_status ;;
_watch)
    DIR=${DIR%/}
    cmd_watch "${3:?_watch needs a pid}"
    ;;
env)
    [[ -n "$DIR" && -f "$DIR/etc/slurm.conf" ]] || die "env needs the DIR of a cluster made by 'up'"
    DIR=$(cd "$DIR" && pwd -P)
    print_env
    ;;
-h | --help | help) usage ;;
*) die "unknown action '$action' (up|down|status|env)" ;;
esac
