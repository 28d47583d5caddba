-- A raw data file that names its package (raw_data_files.raw_data_package_id) is listed in no other package's file_ids (membership is stored twice today; the two must not disagree).
SELECT f.id::text AS id,
       'names package ' || f.raw_data_package_id || ' but package ' || p.id || ' lists it in file_ids' AS detail
FROM raw_data_files f
JOIN raw_data_packages p ON p.file_ids @> ARRAY[f.id] AND p.id <> f.raw_data_package_id
WHERE f.raw_data_package_id IS NOT NULL
ORDER BY f.id, p.id
