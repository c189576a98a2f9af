module wbcore_runtime.local/table

go 1.21
