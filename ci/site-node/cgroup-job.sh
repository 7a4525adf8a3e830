#!/bin/bash
#SBATCH -n1 -c1
# cgroup-job.sh: what a job's owner can do to its cgroups under cgroup v2 with controllers
# (the site-node scenario, ci/site-node/entry.sh): each try's outcome, one line each.
me=$(sed -n 's/^0:://p' /proc/self/cgroup)
echo "own $me"
dir=/sys/fs/cgroup$me
job=${dir%%/step_*}
err=$(mktemp)
try() {
    if sh -c "$2" 2>"$err"; then
        echo "$1 ok"
    else
        echo "$1 refused: $(tr '\n' ' ' <"$err")"
    fi
}
try write_own_cpu_max "echo '10000 100000' > $dir/cpu.max"
try write_job_cpu_max "echo '10000 100000' > $job/cpu.max"
try write_job_memory_max "echo 1000000 > $job/memory.max"
try write_job_subtree_control "echo -cpu > $job/cgroup.subtree_control"
try mkdir_in_own "mkdir $dir/escape"
try move_to_root "echo $$ > /sys/fs/cgroup/cgroup.procs"
try move_to_user_slice "echo $$ > /sys/fs/cgroup/user.slice/cgroup.procs"
try move_to_job "echo $$ > $job/cgroup.procs"
try move_to_extern "echo $$ > $job/step_extern/cgroup.procs"
try move_to_system_slice "echo $$ > /sys/fs/cgroup/system.slice/cgroup.procs"
echo "after $(sed -n 's/^0:://p' /proc/self/cgroup)"
echo "modes $(stat -c '%n %U:%G %a' "$dir" "$dir/cgroup.procs" "$job/cpu.max" | tr '\n' ';')"
rm -f "$err"
