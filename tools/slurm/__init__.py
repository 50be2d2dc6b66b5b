"""SLURM: ``client.py`` (sbatch/sacct/squeue/scontrol/srun), ``query.py`` (the one parser of the
query commands' delimited output, and the retrying of transient failures), ``ids.py`` (the one
job-id validator, and every id form a job is known by), ``submission.py`` (one sbatch per
submission: the intent record), ``jobscript.py`` (rendering the ``sbatch/*.j2`` templates),
``health.py`` (the mount-health probe's exit 42 and ``known_bad_nodes.txt``)."""
