/*
 * Functions exported by libslurmfull (and so present in every slurmctld,
 * slurmd and slurmstepd process) that no public Slurm header declares.
 *
 * Slurm frees what it is handed with its own allocator (xfree checks a magic
 * header in front of the block), so anything a plugin gives Slurm to own --
 * job_submit's *err_msg, entries of job_desc->spank_job_env -- must come from
 * these functions, never from malloc or Rust.
 *
 * Signatures checked against src/common/xmalloc.h and src/common/xstring.h
 * of Slurm 22.05 through 26.05 and of the 26.11 pre-release (SchedMD's
 * master of 2026-08-20, 284c3b95): unchanged in all of them.
 */
#ifndef GPUSHARE_SLURM_UNEXPORTED_H
#define GPUSHARE_SLURM_UNEXPORTED_H

#include <stdbool.h>
#include <stddef.h>

#include <slurm/slurm.h>

/* xstrdup(): copy of a C string in Slurm's allocator (NULL stays NULL). */
char *slurm_xstrdup(const char *str);

/* xfree(p): frees and sets *p = NULL. */
void slurm_xfree(void **item);

/*
 * xrecalloc(p, count, size): resize *item to count*size bytes, zeroing the
 * new part when clear is true. try=false aborts the daemon on OOM like the
 * rest of Slurm does. file/line/func only feed Slurm's OOM message.
 */
void *slurm_xrecalloc(void **item, size_t count, size_t size, bool clear,
		      bool try_, const char *file, int line, const char *func);

/*
 * The configuration of the daemon we are loaded in; `slurm_conf.slurm_conf`
 * is the path of the slurm.conf in use (honours `slurmctld -f` and
 * SLURM_CONF). Declared in src/common/read_config.h; the struct type itself
 * is public (slurm.h). Read-only for plugins.
 */
extern slurm_conf_t slurm_conf;

#endif
