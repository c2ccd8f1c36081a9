/*
 * slurmctld's association manager, as job_submit plugins reach it.
 *
 * slurmctld resolves what a job falls back to (its association's default
 * QOS, its account's parents) from the association manager of
 * src/common/assoc_mgr.c, which libslurmfull exports and slurmctld keeps
 * filled from slurmdbd. job_submit/lua reads the same functions for
 * job_desc.default_qos. No public header declares them.
 *
 * Signatures and the lock struct checked against src/common/assoc_mgr.h and
 * src/slurmctld/locks.h of Slurm 22.05, 23.02, 23.11, 24.05, 24.11, 25.05,
 * 25.11, 26.05 and the 26.11 pre-release (SchedMD's master of 2026-08-20,
 * 284c3b95): unchanged in all of them. The records themselves
 * (slurmdb_*_rec_t) come from the public slurmdb.h of the release built for.
 *
 * slurmctld's own globals (acct_db_conn, accounting_enforce,
 * default_part_name) live in the slurmctld binary, not in libslurmfull: the
 * plugin looks them up with dlsym at init, so that it also loads outside
 * slurmctld (its tests and benchmarks), where it resolves nothing.
 */
#ifndef GPUSHARE_SLURMCTLD_ASSOC_MGR_H
#define GPUSHARE_SLURMCTLD_ASSOC_MGR_H

#include <stdbool.h>
#include <stdint.h>

#include <slurm/slurm.h>
#include <slurm/slurmdb.h>

/* lock_level_t of src/slurmctld/locks.h. */
typedef enum {
	GPUSHARE_NO_LOCK,
	GPUSHARE_READ_LOCK,
	GPUSHARE_WRITE_LOCK,
} gpushare_lock_level_t;

/* assoc_mgr_lock_t of src/common/assoc_mgr.h, field for field. */
typedef struct {
	gpushare_lock_level_t assoc;
	gpushare_lock_level_t file;
	gpushare_lock_level_t qos;
	gpushare_lock_level_t res;
	gpushare_lock_level_t tres;
	gpushare_lock_level_t user;
	gpushare_lock_level_t wckey;
} gpushare_assoc_mgr_lock_t;

void assoc_mgr_lock(gpushare_assoc_mgr_lock_t *locks);
void assoc_mgr_unlock(gpushare_assoc_mgr_lock_t *locks);

/*
 * Fill in *assoc / *user / *qos from the manager's record found by the
 * fields set (uid, acct, partition; uid; id or name). With locked=true the
 * caller holds the read locks; the strings filled in point into the
 * manager's records, valid only while those locks are held.
 */
int assoc_mgr_fill_in_assoc(void *db_conn, slurmdb_assoc_rec_t *assoc,
			    int enforce, slurmdb_assoc_rec_t **assoc_pptr,
			    bool locked);
int assoc_mgr_fill_in_user(void *db_conn, slurmdb_user_rec_t *user,
			   int enforce, slurmdb_user_rec_t **user_pptr,
			   bool locked);
int assoc_mgr_fill_in_qos(void *db_conn, slurmdb_qos_rec_t *qos, int enforce,
			  slurmdb_qos_rec_t **qos_pptr, bool locked);

/*
 * The QOS a job of this association gets when it names none: its default
 * QOS, else its only QOS, else the root's default, else "normal" -- what
 * slurmctld's _determine_and_validate_qos applies. Reads the record under
 * the caller's assoc read lock.
 */
void assoc_mgr_get_default_qos_info(slurmdb_assoc_rec_t *assoc_ptr,
				    slurmdb_qos_rec_t *qos_rec);

#endif
