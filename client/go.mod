module github.com/locking-center/locking-center/client

go 1.26.8
