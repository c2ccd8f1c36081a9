/* A user's own client SPANK plugin, as any user can load one through their
 * own copy of slurm.conf (PlugStackConfig=) when running sbatch, srun or
 * salloc. Each argument NAME=VALUE is put into the job's SPANK environment
 * with spank_job_control_setenv, the channel job_submit/gpu_qos uses to
 * tell the node a share's size. Test fixture of gpushare's attack suite. */
#include <stdio.h>
#include <string.h>
#include <slurm/spank.h>

SPANK_PLUGIN(forge, 1);

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	int i;
	if (spank_context() != S_CTX_LOCAL && spank_context() != S_CTX_ALLOCATOR)
		return 0;
	for (i = 0; i < ac; i++) {
		char name[256];
		const char *eq = strchr(av[i], '=');
		size_t n;
		if (!eq)
			continue;
		n = (size_t)(eq - av[i]);
		if (n == 0 || n >= sizeof(name))
			continue;
		memcpy(name, av[i], n);
		name[n] = '\0';
		if (spank_job_control_setenv(sp, name, eq + 1, 1) != ESPANK_SUCCESS)
			fprintf(stderr, "forge: cannot set %s\n", name);
	}
	return 0;
}
