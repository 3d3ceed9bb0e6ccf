#!/usr/bin/env python3
"""Prints README.md's preemption job script (the ```sh block with "#SBATCH --requeue" under "Preemption and requeue
under Slurm") for tests/slurm/test_preempt.sh: the same text with the test's sizes and trainer options substituted
and one line added after rc=$? that prints the exit code. Each substitution must match exactly once, so a README
whose script changes fails the test (exit 1 with the reason) instead of being tested in an older form.
usage: readme_job.py README RUN PLUGIN TRAINER DATA DIR"""
import re
import sys


def main():
    if len(sys.argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    readme, run, plugin, trainer, data, d = sys.argv[1:]
    blocks = [b for b in re.findall(r"```sh\n(.*?)\n```", open(readme).read(), re.S) if "#SBATCH --requeue" in b]
    if len(blocks) != 1:
        print("README.md: %d sh blocks with #SBATCH --requeue, want 1" % len(blocks), file=sys.stderr)
        return 1
    job = blocks[0] + "\n"
    subs = [("#SBATCH --nodes=2 --ntasks-per-node=4 --time=04:00:00", "#SBATCH --nodes=1 --ntasks=2"),
            ("srun --mpi=pmix -K build/examples/train_digits --checkpoint-dir ck --checkpoint-every 100 $resume",
             "srun --mpi=%s -K %s --data %s --steps 60 --batch 16 --hidden 32 --seed 3 --print-every 1 "
             "--throttle-ms 150 --checkpoint-dir %s/%s.ck --checkpoint-every 25 $resume --loss-file %s/%s.loss "
             "--dump-weights %s/%s.w" % (plugin, trainer, data, d, run, d, run, d, run)),
            ("rc=$?\n", 'rc=$?\necho "job $SLURM_JOB_ID restart ${SLURM_RESTART_COUNT:-0} exit $rc"\n')]
    for a, b in subs:
        if job.count(a) != 1:
            print("README.md's job script: %r found %d times, want 1" % (a, job.count(a)), file=sys.stderr)
            return 1
        job = job.replace(a, b)
    sys.stdout.write(job)
    return 0


if __name__ == "__main__":
    sys.exit(main())
