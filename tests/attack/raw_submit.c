/* A batch submission through libslurm, as any user can write one: the
 * client fills job_desc_msg_t itself, SPANK environment included (with
 * duplicates if it likes). Test fixture of gpushare's attack suite.
 *
 *   raw_submit OUTPUT SCRIPT TRES_PER_NODE|- [SPANK_ENTRY...]
 *
 * Prints the job id. TRES_PER_NODE is what sbatch --gres sends (22.05:
 * gres:mps:50). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <slurm/slurm.h>
#include <slurm/slurm_version.h>
#include <slurm/slurm_errno.h>

int main(int argc, char **argv)
{
	job_desc_msg_t desc;
	submit_response_msg_t *resp = NULL;
	char *env[] = { "PATH=/usr/local/bin:/usr/bin:/bin", NULL };
	char cwd[4096];

	if (argc < 4) {
		fprintf(stderr, "usage: %s OUTPUT SCRIPT TRES|- [SPANK_ENTRY...]\n", argv[0]);
		return 2;
	}
	slurm_init(NULL);
	slurm_init_job_desc_msg(&desc);
	desc.name = "raw_submit";
	desc.script = argv[2];
	desc.std_out = argv[1];
	desc.work_dir = getcwd(cwd, sizeof(cwd)) ? cwd : "/tmp";
	desc.user_id = getuid();
	desc.group_id = getgid();
	desc.min_nodes = 1;
	desc.environment = env;
	desc.env_size = 1;
	if (strcmp(argv[3], "-") != 0)
		desc.tres_per_node = argv[3];
	desc.spank_job_env = argv + 4;
	desc.spank_job_env_size = (uint32_t)(argc - 4);
	if (slurm_submit_batch_job(&desc, &resp) != SLURM_SUCCESS || !resp) {
		slurm_perror("slurm_submit_batch_job");
		return 1;
	}
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
	printf("%u\n", resp->step_id.job_id); /* moved into step_id in 25.11 */
#else
	printf("%u\n", resp->job_id);
#endif
	slurm_free_submit_response_response_msg(resp);
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 2, 0) && SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(23, 11, 0)
	/* 23.02's slurm_fini() runs select/cons_tres's fini, which calls
	 * cr_fini_global_core_data(), a function libslurm.so does not export:
	 * the program would die of a symbol lookup error after its work. */
	fflush(stdout);
#else
	slurm_fini();
#endif
	return 0;
}
