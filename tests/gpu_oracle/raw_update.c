/* An update of a pending job through libslurm, as any user can write one:
 * the client fills job_desc_msg_t's TRES fields itself, several in one
 * request, each string exactly as given (no `gres:` prepended, nothing
 * joined to what the job had). Test fixture of gpushare's oracle.
 *
 *   raw_update JOB_ID FIELD=VALUE...
 *
 * FIELD: tres_per_job, tres_per_node, tres_per_socket, tres_per_task,
 * array_inx (what ArrayTaskThrottle= sends). Exit 0 when slurmctld took
 * it; 1 with Slurm's words on stderr when it did not. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <slurm/slurm.h>
#include <slurm/slurm_version.h>
#include <slurm/slurm_errno.h>

int main(int argc, char **argv)
{
	job_desc_msg_t desc;
	char *end = NULL;
	unsigned long id;
	int i, rc;

	if (argc < 3) {
		fprintf(stderr, "usage: %s JOB_ID FIELD=VALUE...\n", argv[0]);
		return 2;
	}
	id = strtoul(argv[1], &end, 10);
	if (!id || !end || *end) {
		fprintf(stderr, "not a job id: %s\n", argv[1]);
		return 2;
	}
	slurm_init(NULL);
	slurm_init_job_desc_msg(&desc);
	/* The job by its number (scontrol sends the text, job_id_str, whose
	 * answer slurm_update_job() cannot give back on 22.05). */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
	desc.step_id.job_id = (uint32_t)id; /* moved into step_id in 25.11 */
#else
	desc.job_id = (uint32_t)id;
#endif
	for (i = 2; i < argc; i++) {
		char *eq = strchr(argv[i], '=');
		if (!eq) {
			fprintf(stderr, "not FIELD=VALUE: %s\n", argv[i]);
			return 2;
		}
		*eq = '\0';
		if (!strcmp(argv[i], "tres_per_job"))
			desc.tres_per_job = eq + 1;
		else if (!strcmp(argv[i], "tres_per_node"))
			desc.tres_per_node = eq + 1;
		else if (!strcmp(argv[i], "tres_per_socket"))
			desc.tres_per_socket = eq + 1;
		else if (!strcmp(argv[i], "tres_per_task"))
			desc.tres_per_task = eq + 1;
		else if (!strcmp(argv[i], "array_inx"))
			desc.array_inx = eq + 1;
		else {
			fprintf(stderr, "unknown field: %s\n", argv[i]);
			return 2;
		}
	}
	rc = slurm_update_job(&desc);
	if (rc != SLURM_SUCCESS) {
		fprintf(stderr, "slurm_update_job: %s\n", slurm_strerror(errno));
		fflush(stderr);
		return 1;
	}
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0) && SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(23, 11, 0)
	/* As raw_submit.c: 23.02's slurm_fini() dies of a missing symbol. */
	fflush(stdout);
#else
	slurm_fini();
#endif
	return 0;
}
