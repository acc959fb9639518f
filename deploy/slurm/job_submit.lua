-- Lachesis submit plugin: every job submitted to a managed partition is held on arrival
-- (priority 0) and stamped with the marker the bridge looks for (AdminComment, which users
-- cannot set or change). `lachesis slurm-bridge` then pins each job to the nodes the decision
-- service chose and releases it.
--
-- Install: copy next to slurm.conf, set `JobSubmitPlugins=lua`, `scontrol reconfigure`.
-- Keep MARKER equal to the bridge's `slurm.marker`.

local MARKER = "lachesis:managed"

-- Partitions whose jobs Lachesis decides; empty: every partition. Jobs without an explicit
-- partition go to the default one, matched by the name below (nil: managed).
local MANAGED_PARTITIONS = {}
local DEFAULT_PARTITION = nil

local function managed(partition)
  if next(MANAGED_PARTITIONS) == nil then
    return true
  end
  local p = partition or DEFAULT_PARTITION
  if p == nil then
    return true
  end
  -- A comma list of partitions is managed if any of them is.
  for name in string.gmatch(p, "[^,]+") do
    if MANAGED_PARTITIONS[name] then
      return true
    end
  end
  return false
end

function slurm_job_submit(job_desc, part_list, submit_uid)
  if managed(job_desc.partition) then
    job_desc.priority = 0
    job_desc.admin_comment = MARKER
  end
  return slurm.SUCCESS
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end

return slurm.SUCCESS
