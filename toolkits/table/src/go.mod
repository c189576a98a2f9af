module wbcore.local/table

go 1.21
