"""SLURM: ``client.py`` (sbatch/sacct/scontrol/srun), ``jobscript.py`` (rendering the
``sbatch/*.j2`` templates), ``health.py`` (the mount-health probe's exit 42 and
``known_bad_nodes.txt``)."""
