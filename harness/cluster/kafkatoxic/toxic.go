package main

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// The kafka toxic sits on the upstream (client -> broker) stream, follows Kafka's request
// framing and applies one action to the requests it matches. It only ever decides at a frame
// boundary; the rest of a frame is passed through chunk by chunk.

func init() {
	toxics.Register("kafka", new(KafkaToxic))
}

const (
	actHold      = "hold_request"
	actDrop      = "drop_response"
	actDuplicate = "duplicate_request"
	actObserve   = "observe"
)

// KafkaConfig holds the toxic's public attributes (JSON "attributes").
type KafkaConfig struct {
	Fault             string   `json:"fault"`
	Proxy             string   `json:"proxy"`
	Action            string   `json:"action"`
	API               []string `json:"api"`
	TransactionalID   string   `json:"transactional_id"`
	ClientID          string   `json:"client_id"`
	Nth               int      `json:"nth"`   // default 1
	Count             int      `json:"count"` // default 1; <0: unlimited
	ReleaseMs         int64    `json:"release_ms"`
	ReleaseAfterAPI   string   `json:"release_after_api"`
	ReleaseAfterCount int      `json:"release_after_count"` // default 1
	ReleaseDelayMs    int64    `json:"release_delay_ms"`
	Released          bool     `json:"released"`
	Upstream          string   `json:"upstream"`
}

// KafkaToxic is the registered toxic. toxiproxy decodes updates into the live struct while
// Pipe runs, so the attributes are guarded by mu and each Pipe run works on a copy.
type KafkaToxic struct {
	KafkaConfig
	mu      sync.Mutex
	created bool // attributes decoded once: later decodes are updates
}

func (t *KafkaToxic) config() KafkaConfig {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.KafkaConfig
}

func (t *KafkaToxic) MarshalJSON() ([]byte, error) {
	return json.Marshal(t.config())
}

// UnmarshalJSON validates the attributes, and applies `released: true` to the whole fault
// right away: the update may come through a proxy with no open connection, where Pipe
// would never be re-run.
func (t *KafkaToxic) UnmarshalJSON(b []byte) error {
	t.mu.Lock()
	cfg := t.KafkaConfig // an update changes only the attributes it names
	if !t.created {
		cfg.Nth, cfg.Count, cfg.ReleaseAfterCount = 1, 1, 1
	}
	t.mu.Unlock()
	cfg.API = append([]string(nil), cfg.API...) // never decode into a slice a Pipe reads
	if err := json.Unmarshal(b, &cfg); err != nil {
		return err
	}
	switch cfg.Action {
	case "", actHold, actDrop, actDuplicate, actObserve:
	default:
		return fmt.Errorf("kafka toxic: unknown action %q", cfg.Action)
	}
	for _, name := range cfg.API {
		if _, ok := apiKey(name); !ok {
			return fmt.Errorf("kafka toxic: unknown api %q", name)
		}
	}
	if _, ok := apiKey(cfg.ReleaseAfterAPI); cfg.ReleaseAfterAPI != "" && !ok {
		return fmt.Errorf("kafka toxic: unknown release_after_api %q", cfg.ReleaseAfterAPI)
	}
	if cfg.Action == actDuplicate && cfg.Upstream == "" {
		return fmt.Errorf("kafka toxic: duplicate_request needs upstream")
	}
	t.mu.Lock()
	t.KafkaConfig, t.created = cfg, true
	t.mu.Unlock()
	if cfg.Released {
		reg.releaseAll(cfg.Fault)
	}
	return nil
}

// GetBufferSize gives the toxic an input buffer like latency's, so it never throttles.
func (t *KafkaToxic) GetBufferSize() int { return 1024 }

// connState is one connection's parse state; it survives Pipe being interrupted and re-run.
type connState struct {
	remaining   int64  // bytes of the current, decided frame still to pass
	pending     []byte // undecided bytes from a frame boundary on (a split header)
	passthrough bool   // not Kafka: no more parsing
	inputDone   bool   // Input yielded nil
	dead        bool   // stub closed by drop_response

	hold *hold  // non-nil while holding
	held []byte // the held request and everything after it

	dropAfter bool       // close the connection once the current frame is out
	dup       []byte     // copy of the current frame, for duplicate_request
	dupReq    *ReqFields // its event fields
}

func (t *KafkaToxic) NewState() interface{} { return new(connState) }

// compiled is one Pipe run's view of the attributes.
type compiled struct {
	KafkaConfig
	apis     []int16
	afterAPI int16 // -1: no release_after_api
}

func (t *KafkaToxic) compile() *compiled {
	c := &compiled{KafkaConfig: t.config(), afterAPI: -1}
	if c.Action != actObserve {
		for _, name := range c.API {
			if k, ok := apiKey(name); ok {
				c.apis = append(c.apis, k)
			}
		}
	}
	if k, ok := apiKey(c.ReleaseAfterAPI); ok && c.ReleaseAfterAPI != "" {
		c.afterAPI = k
	}
	return c
}

func (c *compiled) matches(req *Request) bool {
	for _, k := range c.apis {
		if k == req.APIKey {
			return (c.TransactionalID == "" || c.TransactionalID == string(req.TxnID)) &&
				(c.ClientID == "" || c.ClientID == string(req.ClientID))
		}
	}
	return false
}

// inWindow: is the fault's n-th match (1-based) one to act on?
func (c *compiled) inWindow(n int) bool {
	nth, count := max(c.Nth, 1), c.Count
	if count == 0 {
		count = 1
	}
	return n >= nth && (count < 0 || n < nth+count)
}

// pipe is one Pipe run.
type pipe struct {
	cfg  *compiled
	stub *toxics.ToxicStub
	st   *connState
}

func (t *KafkaToxic) Pipe(stub *toxics.ToxicStub) {
	p := &pipe{cfg: t.compile(), stub: stub, st: stub.State.(*connState)}
	st := p.st
	for !st.dead {
		input := stub.Input
		if st.inputDone {
			input = nil // closed: keep waiting for the release only
		}
		var released <-chan struct{}
		if st.hold != nil {
			released = st.hold.done
		}
		select {
		case <-stub.Interrupt:
			return // state (held bytes included) stays for the next run or Cleanup
		case <-released:
			p.release(st.hold.reason)
		case c := <-input:
			if c == nil {
				st.inputDone = true
			} else {
				p.feed(c)
			}
		}
		// A held connection whose client left stays open until the release delivers it.
		if st.inputDone && st.hold == nil && !st.dead {
			p.writeBytes(st.pending)
			st.pending = nil
			stub.Close()
			return
		}
	}
}

// Cleanup runs when the toxic is removed: deliver what is held or withheld, and finish a
// connection whose client already left.
func (t *KafkaToxic) Cleanup(stub *toxics.ToxicStub) {
	p := &pipe{cfg: t.compile(), stub: stub, st: stub.State.(*connState)}
	st := p.st
	if st.dead {
		return
	}
	if h := st.hold; h != nil {
		h.fire("removed") // no-op if a release already fired; then its reason stands
		p.endHold(h.reason)
		p.writeBytes(st.held)
		st.hold, st.held = nil, nil
	}
	p.writeBytes(st.pending)
	st.pending = nil
	if st.inputDone {
		stub.Close()
	}
}

func (p *pipe) feed(c *stream.StreamChunk) {
	st := p.st
	if st.hold != nil {
		st.held = append(st.held, c.Data...)
		return
	}
	if len(st.pending) > 0 { // rare: a header split across chunks
		data := append(st.pending, c.Data...)
		st.pending = nil
		c = &stream.StreamChunk{Data: data, Timestamp: c.Timestamp}
	}
	p.process(c)
}

// process passes c.Data on, deciding at each frame boundary. Forwarded bytes are written
// as one range per chunk, so a chunk with no hold or drop in it goes out as the same chunk.
func (p *pipe) process(c *stream.StreamChunk) {
	st, data := p.st, c.Data
	fwd, i := 0, 0 // data[fwd:i] is to be forwarded and not written yet
	for i < len(data) && !st.passthrough {
		if st.remaining > 0 {
			n := int(min(st.remaining, int64(len(data)-i)))
			if st.dup != nil {
				st.dup = append(st.dup, data[i:i+n]...)
			}
			i += n
			st.remaining -= int64(n)
			if st.remaining == 0 && st.dropAfter {
				p.write(c, data[fwd:i])
				p.drop()
				return
			}
			if st.remaining == 0 && st.dup != nil {
				p.write(c, data[fwd:i]) // the original goes first
				fwd = i
				p.duplicate(st.dup, st.dupReq)
				st.dup, st.dupReq = nil, nil
			}
			continue
		}
		req, ok, needMore := parseRequest(data[i:])
		if needMore {
			p.write(c, data[fwd:i])
			st.pending = append([]byte(nil), data[i:]...)
			return
		}
		if !ok {
			p.unparsed()
			st.passthrough = true
			break
		}
		st.remaining = req.FrameLen()
		if p.decide(&req) {
			p.write(c, data[fwd:i])
			st.held = append([]byte(nil), data[i:]...)
			return
		}
	}
	p.write(c, data[fwd:])
}

// decide applies the action to a request at its frame boundary; true means hold it.
func (p *pipe) decide(req *Request) bool {
	c, st := p.cfg, p.st
	if c.matches(req) && c.inWindow(reg.nextMatch(c.Fault)) {
		f := fieldsOf(req)
		switch c.Action {
		case actHold:
			h := p.newHold(req, f)
			if reg.addHold(h) {
				emit(c, event{Event: "match", ReqFields: f})
				emit(c, event{Event: "hold", ReqFields: f})
				if c.ReleaseMs > 0 {
					h.timer = time.AfterFunc(ms(c.ReleaseMs), func() { h.fire("ms") })
				}
				st.hold = h
				return true
			}
			// The fault was released by an update: hold nothing more.
		case actDrop:
			emit(c, event{Event: "match", ReqFields: f})
			emit(c, event{Event: "drop_response", ReqFields: f})
			st.dropAfter = true
		case actDuplicate:
			emit(c, event{Event: "match", ReqFields: f})
			st.dup, st.dupReq = make([]byte, 0, req.FrameLen()), f
		}
	}
	reg.forwarded(c.Fault, req)
	return false
}

// write sends b, a sub-slice of c.Data, reusing c when b is all of it.
func (p *pipe) write(c *stream.StreamChunk, b []byte) {
	if len(b) == len(c.Data) && len(b) > 0 {
		p.stub.Output <- c
	} else if len(b) > 0 {
		p.stub.Output <- &stream.StreamChunk{Data: b, Timestamp: c.Timestamp}
	}
}

func (p *pipe) writeBytes(b []byte) {
	if len(b) > 0 {
		p.stub.Output <- &stream.StreamChunk{Data: b, Timestamp: time.Now()}
	}
}

// release delivers the held request and re-parses what queued up behind it (which may
// itself start a new hold).
func (p *pipe) release(reason string) {
	st := p.st
	p.endHold(reason)
	held := st.held
	st.hold, st.held = nil, nil
	p.process(&stream.StreamChunk{Data: held, Timestamp: time.Now()})
}

func (p *pipe) endHold(reason string) {
	h := p.st.hold
	reg.removeHold(h)
	if h.timer != nil {
		h.timer.Stop()
	}
	heldMs := float64(time.Since(h.start)) / float64(time.Millisecond)
	emit(p.cfg, event{Event: "release", ReqFields: h.req, Reason: reason, HeldMs: &heldMs})
}

// drop ends the connection right after the matched request: closing the stub makes
// toxiproxy close the broker socket (Kafka still handles a request it has fully read)
// and then the client's, so the response is lost.
func (p *pipe) drop() {
	p.st.dead = true
	p.stub.Close()
	go func(in <-chan *stream.StreamChunk) {
		for range in { // keep the toxics before us from blocking
		}
	}(p.stub.Input)
}

// duplicate sends a copy of a forwarded request on a connection of its own, and reads
// (and discards) the broker's response so the broker is not left writing into the void.
func (p *pipe) duplicate(frame []byte, f *ReqFields) {
	c := p.cfg
	go func() {
		conn, err := net.DialTimeout("tcp", c.Upstream, 10*time.Second)
		if err == nil {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			_, err = conn.Write(frame)
		}
		e := event{Event: "duplicate", ReqFields: f}
		if err != nil {
			e.Error = err.Error()
		}
		emit(c, e)
		if err == nil {
			var size [4]byte
			if _, err := io.ReadFull(conn, size[:]); err == nil {
				_, _ = io.CopyN(io.Discard, conn, int64(binary.BigEndian.Uint32(size[:])))
			}
		}
	}()
}

func (p *pipe) unparsed() {
	emit(p.cfg, event{Event: "unparsed", Count: reg.countUnparsed(p.cfg.Fault)})
}

func (p *pipe) newHold(req *Request, f *ReqFields) *hold {
	c := p.cfg
	h := &hold{
		start:     time.Now(),
		req:       f,
		afterAPI:  c.afterAPI,
		afterLeft: max(c.ReleaseAfterCount, 1),
		delay:     ms(c.ReleaseDelayMs),
		fault:     c.Fault,
		done:      make(chan struct{}),
	}
	// Requests that release this hold carry its transactional id, else its client id.
	if len(req.TxnID) > 0 {
		h.byTxn, h.key = true, f.TransactionalID
	} else {
		h.key = f.ClientID
	}
	return h
}

func ms(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// hold is one held request. fire may be called from timers, the registry and Pipe.
type hold struct {
	fault     string
	start     time.Time
	req       *ReqFields
	afterAPI  int16
	afterLeft int // guarded by reg.mu
	byTxn     bool
	key       string
	delay     time.Duration
	timer     *time.Timer
	once      sync.Once
	done      chan struct{}
	reason    string // set once, before done is closed
}

func (h *hold) fire(reason string) {
	h.once.Do(func() {
		h.reason = reason
		close(h.done)
	})
}

// registry is the process-global state of every fault, shared by all its toxics across
// proxies: the match counter and the live holds.
type registry struct {
	mu     sync.Mutex
	faults map[string]*faultState
	nholds atomic.Int64 // live holds, all faults: lets forwarded() skip the lock
}

type faultState struct {
	matches  int
	unparsed int
	released bool // released by an update: hold nothing more
	holds    map[*hold]struct{}
}

var reg = &registry{faults: map[string]*faultState{}}

func (r *registry) fault(id string) *faultState { // r.mu held
	fs := r.faults[id]
	if fs == nil {
		fs = &faultState{holds: map[*hold]struct{}{}}
		r.faults[id] = fs
	}
	return fs
}

func (r *registry) nextMatch(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs := r.fault(id)
	fs.matches++
	return fs.matches
}

func (r *registry) countUnparsed(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs := r.fault(id)
	fs.unparsed++
	return fs.unparsed
}

func (r *registry) addHold(h *hold) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs := r.fault(h.fault)
	if fs.released {
		return false
	}
	fs.holds[h] = struct{}{}
	r.nholds.Add(1)
	return true
}

func (r *registry) removeHold(h *hold) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if fs := r.faults[h.fault]; fs != nil {
		if _, ok := fs.holds[h]; ok {
			delete(fs.holds, h)
			r.nholds.Add(-1)
		}
	}
}

// forwarded counts a request that went on towards the broker against the fault's holds
// waiting for release_after_api.
func (r *registry) forwarded(id string, req *Request) {
	if r.nholds.Load() == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	fs := r.faults[id]
	if fs == nil {
		return
	}
	for h := range fs.holds {
		if h.afterAPI != req.APIKey || h.afterLeft <= 0 {
			continue
		}
		key := req.ClientID
		if h.byTxn {
			key = req.TxnID
		}
		if string(key) != h.key {
			continue
		}
		if h.afterLeft--; h.afterLeft == 0 {
			if h.delay > 0 {
				time.AfterFunc(h.delay, func() { h.fire("after_api") })
			} else {
				h.fire("after_api")
			}
		}
	}
}

func (r *registry) releaseAll(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fs := r.fault(id)
	fs.released = true
	for h := range fs.holds {
		h.fire("update")
	}
}

// Events: one JSON object per line.

type ReqFields struct {
	API             string `json:"api"`
	APIKey          int16  `json:"api_key"`
	APIVersion      int16  `json:"api_version"`
	CorrelationID   int32  `json:"correlation_id"`
	ClientID        string `json:"client_id"`
	TransactionalID string `json:"transactional_id"`
}

func fieldsOf(req *Request) *ReqFields {
	return &ReqFields{
		API:             apiName(req.APIKey),
		APIKey:          req.APIKey,
		APIVersion:      req.APIVersion,
		CorrelationID:   req.CorrelationID,
		ClientID:        string(req.ClientID),
		TransactionalID: string(req.TxnID),
	}
}

type event struct {
	TNs   int64  `json:"t_ns"`
	Fault string `json:"fault"`
	Proxy string `json:"proxy"`
	Event string `json:"event"`
	*ReqFields
	Reason string   `json:"reason,omitempty"`  // release
	HeldMs *float64 `json:"held_ms,omitempty"` // release
	Error  string   `json:"error,omitempty"`   // duplicate: the copy could not be sent
	Count  int      `json:"count,omitempty"`   // unparsed: the fault's unparsed connections so far
}

// eventLog appends events; each line is written whole, unbuffered, under the mutex.
type eventLog struct {
	mu sync.Mutex
	w  io.Writer
}

var events *eventLog // nil: events off

func emit(c *compiled, e event) {
	if events == nil {
		return
	}
	e.TNs, e.Fault, e.Proxy = time.Now().UnixNano(), c.Fault, c.Proxy
	line, err := json.Marshal(e)
	if err != nil {
		return
	}
	events.mu.Lock()
	defer events.mu.Unlock()
	_, _ = events.w.Write(append(line, '\n'))
}
