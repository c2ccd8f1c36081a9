-- The alternative a site would write: rule 1 of gpu_qos (reject untyped GPU
-- requests under a group QOS) as a job_submit/lua script, for the benchmark.
-- Matches what Slurm 22.05-23.02 ("gres:gpu:2") and 23.11+ ("gres/gpu:2") send.
local group_types = {
   qos_dijk = "h100", qos_zhuoran_yang = "h100", qos_ma_zongming = "h100",
   qos_saxena = "a100", qos_ying_rex = "a40", qos_lafferty = "a40",
   qos_yildirim = "a40",
}
local fields = { "tres_per_node", "tres_per_job", "tres_per_socket", "tres_per_task" }

function slurm_job_submit(job_desc, part_list, submit_uid)
   -- A job naming no QOS runs under its association's default.
   local qos = job_desc.qos
   if qos == nil then
      qos = job_desc.default_qos
   end
   if qos == nil or group_types[qos] == nil then
      return slurm.SUCCESS
   end
   for _, field in ipairs(fields) do
      local value = job_desc[field]
      if value ~= nil then
         for entry in string.gmatch(value, "[^,]+") do
            local rest = string.match(entry, "^gres[:/]gpu(.*)$")
            if rest ~= nil then
               local gtype = string.match(rest, "^:([%a][%w_.-]*)")
               if gtype == nil then
                  slurm.log_user("QOS %s needs a GPU type: use --gres=gpu:%s:N",
                                 qos, group_types[qos])
                  return slurm.ERROR
               end
            end
         end
      end
   end
   return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
   return slurm.SUCCESS
end
