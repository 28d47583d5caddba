-- Raw data packages holding a file of another execution or instrument module than their own.
SELECT p.id::text AS id,
       'file ' || f.id || ' is of execution ' || f.executed_obs_unit_id || ' and module ' || f.instrument_module_id ||
       ', the package of execution ' || p.executed_obs_unit_id || ' and module ' || p.instrument_module_id AS detail
FROM raw_data_package_files m
JOIN raw_data_packages p ON p.id = m.package_id
JOIN raw_data_files f ON f.id = m.file_id
WHERE f.executed_obs_unit_id <> p.executed_obs_unit_id OR f.instrument_module_id <> p.instrument_module_id
ORDER BY p.id, f.id
