package main

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// The clients of the floors and of the peers Locking-Center is compared with.
// Each is one locker and serves one goroutine.

// connectFloor is the floor of a one-request-per-connection protocol: each
// "request" connects, exchanges one byte and closes, as a v1 request does.
type connectFloor struct {
	addr   string
	dialer net.Dialer
}

// Lock is one exchange: a floor locks nothing.
func (c *connectFloor) Lock(ctx context.Context, _ string) error { return c.exchange(ctx) }

// Unlock is one exchange, as Lock.
func (c *connectFloor) Unlock(ctx context.Context, _ string) error { return c.exchange(ctx) }

// Close releases what the client holds open.
func (c *connectFloor) Close() error { return nil }

func (c *connectFloor) exchange(ctx context.Context) error {
	conn, err := c.dialer.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return fmt.Errorf("floor connect: %w", err)
	}
	defer conn.Close()
	var b = [1]byte{'.'}
	if _, err := conn.Write(b[:]); err != nil {
		return fmt.Errorf("floor write: %w", err)
	}
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return fmt.Errorf("floor read: %w", err)
	}
	awaitEOF(conn) // as the v1 client does
	return nil
}

// persistentFloor is the floor of a protocol on a persistent connection:
// each "request" is a one-byte ping-pong on the same connection.
type persistentFloor struct {
	conn net.Conn
	b    [1]byte
}

func dialPersistentFloor(ctx context.Context, addr string) (*persistentFloor, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("floor connect: %w", err)
	}
	return &persistentFloor{conn: conn}, nil
}

// Lock is one exchange: a floor locks nothing.
func (c *persistentFloor) Lock(context.Context, string) error { return c.exchange() }

// Unlock is one exchange, as Lock.
func (c *persistentFloor) Unlock(context.Context, string) error { return c.exchange() }

// Close releases what the client holds open.
func (c *persistentFloor) Close() error { return c.conn.Close() }

func (c *persistentFloor) exchange() error {
	c.b[0] = '.'
	if _, err := c.conn.Write(c.b[:]); err != nil {
		return fmt.Errorf("floor write: %w", err)
	}
	if _, err := io.ReadFull(c.conn, c.b[:]); err != nil {
		return fmt.Errorf("floor read: %w", err)
	}
	return nil
}

// redisDelete is redsync's release: delete the key only if it still holds
// this holder's value, so that a holder whose lease ran out cannot free the
// next holder's lock.
var redisDelete = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`)

// redisClient locks as redsync does on one Redis: SET key value NX PX 30000
// with a value unique to the acquisition; when the key is taken it sleeps a
// random 0…retry and tries again; it releases with redisDelete.
type redisClient struct {
	rdb    *redis.Client
	retry  time.Duration
	id     string
	n      uint64
	values map[string]string
}

func newRedisClient(addr string, id int, retry time.Duration) *redisClient {
	return &redisClient{
		rdb:    redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1, MinIdleConns: 1}),
		retry:  retry,
		id:     "c" + strconv.Itoa(id) + "-",
		values: make(map[string]string),
	}
}

// Lock blocks until key is granted to this client.
func (c *redisClient) Lock(ctx context.Context, key string) error {
	c.n++
	value := c.id + strconv.FormatUint(c.n, 10) + "-" + strconv.FormatUint(rand.Uint64(), 36)
	for {
		ok, err := c.rdb.SetNX(ctx, key, value, 30*time.Second).Result()
		if err != nil {
			return fmt.Errorf("redis set nx: %w", err)
		}
		if ok {
			c.values[key] = value
			return nil
		}
		t := time.NewTimer(rand.N(c.retry + 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Unlock releases this client's grant of key.
func (c *redisClient) Unlock(ctx context.Context, key string) error {
	value, ok := c.values[key]
	if !ok {
		return fmt.Errorf("redis unlock %q: not held here", key)
	}
	delete(c.values, key)
	n, err := redisDelete.Run(ctx, c.rdb, []string{key}, value).Int()
	if err != nil {
		return fmt.Errorf("redis release: %w", err)
	}
	if n != 1 {
		return fmt.Errorf("redis release %q: the key no longer held this holder's value: %w", key, errRefused)
	}
	return nil
}

// Close releases what the client holds open.
func (c *redisClient) Close() error { return c.rdb.Close() }

// etcdClient locks with etcd's concurrency.Mutex, one client connection and
// one session (lease) per locker, as a process of its own would; in workload
// M, one of each shared by every locker.
type etcdClient struct {
	cli     *clientv3.Client
	sess    *concurrency.Session
	own     bool // revoke the session and close the client on Close
	mutexes map[string]*concurrency.Mutex
}

func newEtcdClient(ctx context.Context, endpoints ...string) (*etcdClient, error) {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
		Context:     context.WithoutCancel(ctx),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(60), concurrency.WithContext(context.WithoutCancel(ctx)))
	if err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("etcd session: %w", err)
	}
	return &etcdClient{cli: cli, sess: sess, own: true, mutexes: make(map[string]*concurrency.Mutex)}, nil
}

// Lock blocks until key is granted to this client.
func (c *etcdClient) Lock(ctx context.Context, key string) error {
	m := concurrency.NewMutex(c.sess, "/bench/"+key)
	if err := m.Lock(ctx); err != nil {
		return fmt.Errorf("etcd lock: %w", err)
	}
	c.mutexes[key] = m
	return nil
}

// Unlock releases this client's grant of key.
func (c *etcdClient) Unlock(ctx context.Context, key string) error {
	m, ok := c.mutexes[key]
	if !ok {
		return fmt.Errorf("etcd unlock %q: not held here", key)
	}
	delete(c.mutexes, key)
	if err := m.Unlock(ctx); err != nil {
		return fmt.Errorf("etcd unlock: %w", err)
	}
	return nil
}

func (c *etcdClient) share() client {
	return &etcdClient{cli: c.cli, sess: c.sess, mutexes: make(map[string]*concurrency.Mutex)}
}

// Close releases what the client holds open.
func (c *etcdClient) Close() error {
	if !c.own {
		return nil
	}
	// Close stops the keep-alive and revokes the lease (within the
	// session's TTL of 60 s at most; the server answers at once).
	return errors.Join(c.sess.Close(), c.cli.Close())
}

// pgClient locks with PostgreSQL's session-level advisory locks on one
// persistent connection; a key is hashed to the lock's bigint.
type pgClient struct {
	conn *pgx.Conn
}

func newPgClient(ctx context.Context, dsn string) (*pgClient, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres connect: %w", err)
	}
	return &pgClient{conn: conn}, nil
}

func pgKey(key string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key)) // a hash.Hash never fails to write
	return int64(h.Sum64())
}

// Lock blocks until key is granted to this client.
func (c *pgClient) Lock(ctx context.Context, key string) error {
	if _, err := c.conn.Exec(ctx, "SELECT pg_advisory_lock($1)", pgKey(key)); err != nil {
		return fmt.Errorf("pg_advisory_lock: %w", err)
	}
	return nil
}

// Unlock releases this client's grant of key.
func (c *pgClient) Unlock(ctx context.Context, key string) error {
	var released bool
	if err := c.conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", pgKey(key)).Scan(&released); err != nil {
		return fmt.Errorf("pg_advisory_unlock: %w", err)
	}
	if !released {
		return fmt.Errorf("pg_advisory_unlock(%q) released nothing: %w", key, errRefused)
	}
	return nil
}

// Close releases what the client holds open.
func (c *pgClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.conn.Close(ctx)
}
