//! Everything that touches Slurm: exported symbols, pointers, logging, acct_gather.conf.
