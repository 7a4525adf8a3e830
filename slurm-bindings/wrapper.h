#include <stdbool.h>
#include <stdint.h>
#include <time.h>
#include <slurm/slurm.h>
#include <slurm/slurmdb.h>
