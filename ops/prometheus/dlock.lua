-- dlock's statistics for redis_exporter's -script option:
--
--   prometheus-redis-exporter -redis.addr redis://127.0.0.1:6379 \
--       -script /path/to/ops/prometheus/dlock.lua
--
-- redis_exporter runs this script with EVAL on every scrape and exports
-- the alternating names and values it returns as
-- redis_script_values{key="<name>"}. It returns every numeric field of
-- INFO dlock (dlock_locks, dlock_wait_ms_le_250, ...; the version string
-- is left out), values as strings as the exporter expects. Read-only: it
-- changes nothing and touches no key.
local info = redis.call('INFO', 'dlock')
local result = {}
for name, value in string.gmatch(info, '(dlock_[%w_]+):([^\r\n]*)') do
    if tonumber(value) ~= nil then
        table.insert(result, name)
        table.insert(result, value)
    end
end
return result
