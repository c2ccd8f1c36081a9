/*
 * The one header bindgen reads for slurm-sys.
 *
 * Public Slurm headers, plus the few functions that libslurmfull exports
 * without declaring them in a public header (see slurm_unexported.h).
 */
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#include <slurm/spank.h>

#include "slurm_unexported.h"
#include "slurmctld_assoc_mgr.h"
