module wbcore_runtime.local/go-warmup

go 1.21
