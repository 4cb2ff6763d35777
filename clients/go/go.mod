module github.com/dlock/dlock/clients/go

go 1.24

require github.com/redis/go-redis/v9 v9.21.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
)
