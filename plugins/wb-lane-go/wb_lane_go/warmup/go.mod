module wbcore.local/go-warmup

go 1.21
