package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
)

// transport is raft's NetworkTransport with its replication pipelines
// kept, so that a shutdown can close them. Raft's pipelined replication
// can wedge: once its decoder of answers has stopped (an answer refused,
// or a newer term), nobody drains the pipeline's answers, its window of
// requests in flight fills, and the next AppendEntries waits for room for
// good — a wait only the pipeline's Close ends, which the waiting
// goroutine itself would call. Raft's Shutdown waits for that goroutine:
// a node stopped just after a lossy link healed hung so until it was
// killed.
type transport struct {
	*raft.NetworkTransport

	mu     sync.Mutex // guards pipes and closed
	pipes  map[*pipeline]bool
	closed bool
}

func newTransport(t *raft.NetworkTransport) *transport {
	return &transport{NetworkTransport: t, pipes: map[*pipeline]bool{}}
}

// pipeline is one pipeline of the transport, forgotten when raft closes it.
type pipeline struct {
	raft.AppendPipeline
	t *transport
}

// Close forgets the pipeline and closes it.
func (p *pipeline) Close() error {
	p.t.mu.Lock()
	delete(p.t.pipes, p)
	p.t.mu.Unlock()
	return p.AppendPipeline.Close()
}

// AppendEntriesPipeline opens a pipeline to target and keeps it until it
// is closed; none once closePipelines has run.
func (t *transport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		p.Close()
		return nil, raft.ErrTransportShutdown
	}
	w := &pipeline{AppendPipeline: p, t: t}
	t.pipes[w] = true
	return w, nil
}

// closePipelines closes every open pipeline, which ends an AppendEntries
// waiting in one (ErrPipelineShutdown), and refuses new ones.
func (t *transport) closePipelines() {
	t.mu.Lock()
	t.closed = true
	var open []*pipeline
	for p := range t.pipes {
		open = append(open, p)
	}
	t.mu.Unlock()
	for _, p := range open {
		p.AppendPipeline.Close()
	}
}
