package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/Shopify/toxiproxy/v2/toxics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Events from every test go to one buffer; each test uses its own fault id.
var eventBuf bytes.Buffer

func init() { events = &eventLog{w: &eventBuf} }

type eventLine struct {
	Event           string   `json:"event"`
	Fault           string   `json:"fault"`
	Proxy           string   `json:"proxy"`
	API             string   `json:"api"`
	APIKey          *int16   `json:"api_key"`
	CorrelationID   int32    `json:"correlation_id"`
	TransactionalID string   `json:"transactional_id"`
	Reason          string   `json:"reason"`
	HeldMs          *float64 `json:"held_ms"`
	Error           string   `json:"error"`
	Count           int      `json:"count"`
}

func eventsOf(t *testing.T, fault string) []eventLine {
	t.Helper()
	events.mu.Lock()
	defer events.mu.Unlock()
	var out []eventLine
	for _, line := range strings.Split(strings.TrimSpace(eventBuf.String()), "\n") {
		if line == "" {
			continue
		}
		var e eventLine
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("bad event line %q: %v", line, err)
		}
		if e.Fault == fault {
			out = append(out, e)
		}
	}
	return out
}

// eventNames lists "event:correlation_id[:reason]" for a compact comparison.
func eventNames(t *testing.T, fault string) string {
	var s []string
	for _, e := range eventsOf(t, fault) {
		n := fmt.Sprintf("%s:%d", e.Event, e.CorrelationID)
		if e.Reason != "" {
			n += ":" + e.Reason
		}
		s = append(s, n)
	}
	return strings.Join(s, " ")
}

var faults atomic.Int64

// faultID is unique per test run, since the registry outlives a test (go test -count=N).
func faultID(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), faults.Add(1))
}

func newToxic(t *testing.T, attrs string) *KafkaToxic {
	t.Helper()
	k := new(KafkaToxic)
	if err := json.Unmarshal([]byte(attrs), k); err != nil {
		t.Fatal(err)
	}
	return k
}

// conn is one connection's upstream stub, with channels buffered as toxiproxy does.
type conn struct {
	t     *testing.T
	toxic *KafkaToxic
	in    chan *stream.StreamChunk
	out   chan *stream.StreamChunk
	stub  *toxics.ToxicStub
	done  chan struct{}
}

func newConn(t *testing.T, toxic *KafkaToxic) *conn {
	c := &conn{t: t, toxic: toxic, in: make(chan *stream.StreamChunk, 1024),
		out: make(chan *stream.StreamChunk, 1024)}
	c.stub = toxics.NewToxicStub(c.in, c.out)
	c.stub.State = toxic.NewState()
	c.run()
	return c
}

func (c *conn) run() {
	c.done = make(chan struct{})
	go func() { c.toxic.Pipe(c.stub); close(c.done) }()
}

func (c *conn) interrupt() {
	c.stub.Interrupt <- struct{}{}
	<-c.done
}

func (c *conn) send(chunks ...[]byte) {
	for _, b := range chunks {
		c.in <- &stream.StreamChunk{Data: b, Timestamp: time.Now()}
	}
}

// recv reads exactly want's length and compares.
func (c *conn) recv(want []byte, timeout time.Duration) {
	c.t.Helper()
	var got []byte
	deadline := time.After(timeout)
	for len(got) < len(want) {
		select {
		case ch, ok := <-c.out:
			if !ok {
				c.t.Fatalf("output closed after %d of %d bytes", len(got), len(want))
			}
			got = append(got, ch.Data...)
		case <-deadline:
			c.t.Fatalf("got %d of %d bytes in %v", len(got), len(want), timeout)
		}
	}
	if !bytes.Equal(got, want) {
		c.t.Fatalf("output differs from the expected %d bytes (got %d)", len(want), len(got))
	}
}

func (c *conn) quiet(d time.Duration) {
	c.t.Helper()
	select {
	case ch, ok := <-c.out:
		if !ok {
			c.t.Fatal("output closed")
		}
		c.t.Fatalf("unexpected output: %d bytes", len(ch.Data))
	case <-time.After(d):
	}
}

func (c *conn) closed(timeout time.Duration) {
	c.t.Helper()
	select {
	case ch, ok := <-c.out:
		if ok {
			c.t.Fatalf("output not closed: %d more bytes", len(ch.Data))
		}
	case <-time.After(timeout):
		c.t.Fatal("output not closed")
	}
}

// chunks splits b into pieces of n bytes.
func chunks(b []byte, n int) [][]byte {
	var out [][]byte
	for len(b) > n {
		out = append(out, b[:n])
		b = b[n:]
	}
	return append(out, b)
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }

func produce(corr int32, txn string, pad int) []byte {
	return reqSpec{key: 0, ver: 9, corr: corr, client: "p", txn: txn, pad: pad}.frame()
}
func endTxn(corr int32, txn string) []byte {
	return reqSpec{key: 26, ver: 3, corr: corr, client: "p", txn: txn, pad: 13}.frame()
}
func addParts(corr int32, txn string) []byte {
	return reqSpec{key: 24, ver: 3, corr: corr, client: "p", txn: txn, pad: 20}.frame()
}
func heartbeat(corr int32) []byte {
	return reqSpec{key: 12, ver: 4, corr: corr, client: "c", pad: 30}.frame()
}

func attrs(fault, rest string) string {
	return fmt.Sprintf(`{"fault": %q, "proxy": "p0", %s}`, fault, rest)
}

// With observe, bytes come out exactly as they went in however they are chunked.
func TestFramingPassThrough(t *testing.T) {
	fault := faultID(t)
	toxic := newToxic(t, attrs(fault, `"action": "observe", "api": ["Produce"]`))
	all := cat(heartbeat(1), produce(2, "tx", 1<<20), endTxn(3, "tx"), heartbeat(4), produce(5, "", 100))
	for name, size := range map[string]int{"byte by byte": 1, "3 bytes": 3, "32k": 32 << 10, "all at once": len(all)} {
		t.Run(name, func(t *testing.T) {
			c := newConn(t, toxic)
			parts := chunks(all, size)
			if size == 1 { // a megabyte one byte at a time is slow: the frames' heads will do
				parts = append(chunks(all[:200], 1), chunks(all[200:], 32<<10)...)
			}
			go c.send(parts...) // more chunks than the channels hold
			c.recv(all, 5*time.Second)
			close(c.in)
			c.closed(time.Second)
		})
	}
	if e := eventsOf(t, fault); len(e) != 0 {
		t.Fatalf("observe emitted %v", e)
	}
}

// A chunk that needs no action goes out as the same chunk, without allocating.
func TestPassThroughNoAlloc(t *testing.T) {
	toxic := newToxic(t, attrs(faultID(t), `"action": "hold_request", "api": ["EndTxn"]`))
	out := make(chan *stream.StreamChunk, 1)
	p := &pipe{cfg: toxic.compile(), stub: toxics.NewToxicStub(nil, out), st: new(connState)}
	small := &stream.StreamChunk{Data: cat(heartbeat(1), produce(2, "tx", 500), heartbeat(3))}
	big := produce(4, "tx", 1<<20)
	p.process(&stream.StreamChunk{Data: big[:1000]})
	<-out
	middle := &stream.StreamChunk{Data: big[1000:20000]}
	for name, ch := range map[string]*stream.StreamChunk{"whole frames": small, "inside a frame": middle} {
		p.st.remaining = 0
		if ch == middle {
			p.st.remaining = 1 << 40 // stay inside the big frame
		}
		allocs := testing.AllocsPerRun(100, func() {
			p.process(ch)
			if got := <-out; got != ch {
				t.Fatal("chunk not forwarded as is")
			}
		})
		if allocs != 0 {
			t.Errorf("%s: %v allocations per chunk", name, allocs)
		}
	}
}

func TestHoldReleaseMs(t *testing.T) {
	fault := faultID(t)
	toxic := newToxic(t, attrs(fault, `"action": "hold_request", "api": ["EndTxn"], "release_ms": 300`))
	c := newConn(t, toxic)
	other := newConn(t, toxic)
	before, held, after := produce(1, "tx", 100), endTxn(2, "tx"), heartbeat(3)
	c.send(chunks(cat(before, held, after), 7)...)
	start := time.Now()
	c.recv(before, time.Second)
	c.quiet(100 * time.Millisecond)
	other.send(heartbeat(10), endTxn(11, "tx-other")) // other connections pass, even a match
	other.recv(cat(heartbeat(10), endTxn(11, "tx-other")), time.Second)
	c.recv(cat(held, after), 2*time.Second)
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Fatalf("released after %v", d)
	}
	c.send(endTxn(4, "tx")) // count 1: the next match passes
	c.recv(endTxn(4, "tx"), time.Second)
	if got := eventNames(t, fault); got != "match:2 hold:2 release:2:ms" {
		t.Fatalf("events: %s", got)
	}
	if e := eventsOf(t, fault)[2]; e.HeldMs == nil || *e.HeldMs < 250 || e.API != "EndTxn" || e.TransactionalID != "tx" {
		t.Fatalf("release event: %+v", e)
	}
}

// Released when another connection of the fault forwards AddPartitionsToTxn for the same
// transactional id, then release_delay_ms later.
func TestHoldReleaseAfterAPI(t *testing.T) {
	fault := faultID(t)
	holder := newToxic(t, attrs(fault, `"action": "hold_request", "api": ["EndTxn"],
		"release_after_api": "AddPartitionsToTxn", "release_after_count": 2, "release_delay_ms": 100`))
	observer := newToxic(t, attrs(fault, `"action": "observe"`))
	c := newConn(t, holder)
	o := newConn(t, observer)
	c.send(endTxn(1, "tx1"))
	c.quiet(50 * time.Millisecond)
	o.send(addParts(5, "tx2"), addParts(6, "tx1"), endTxn(7, "tx1")) // only one counts
	o.recv(cat(addParts(5, "tx2"), addParts(6, "tx1"), endTxn(7, "tx1")), time.Second)
	c.quiet(200 * time.Millisecond)
	o.send(addParts(8, "tx1"))
	o.recv(addParts(8, "tx1"), time.Second)
	start := time.Now()
	c.recv(endTxn(1, "tx1"), time.Second)
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Fatalf("release_delay_ms not waited: %v", d)
	}
	if got := eventNames(t, fault); got != "match:1 hold:1 release:1:after_api" {
		t.Fatalf("events: %s", got)
	}
}

// An update with released=true releases every hold of the fault, on every proxy, even across
// an interrupted and re-run Pipe; the fault holds nothing after that.
func TestHoldReleaseByUpdate(t *testing.T) {
	fault := faultID(t)
	a := newToxic(t, attrs(fault, `"action": "hold_request", "api": ["EndTxn"], "count": -1`))
	b := newToxic(t, attrs(fault, `"action": "hold_request", "api": ["EndTxn"], "count": -1`))
	ca, cb := newConn(t, a), newConn(t, b)
	ca.send(endTxn(1, "x"), heartbeat(2))
	cb.send(endTxn(3, "y"))
	ca.quiet(50 * time.Millisecond)
	ca.interrupt() // as toxiproxy does on an update; held bytes stay in the state
	ca.run()
	if err := json.Unmarshal([]byte(`{"released": true}`), b); err != nil {
		t.Fatal(err)
	}
	ca.recv(cat(endTxn(1, "x"), heartbeat(2)), time.Second)
	cb.recv(endTxn(3, "y"), time.Second)
	ca.send(endTxn(4, "x"))
	ca.recv(endTxn(4, "x"), time.Second)
	if n := strings.Count(eventNames(t, fault), ":update"); n != 2 {
		t.Fatalf("events: %s", eventNames(t, fault))
	}
}

// Removing the toxic (POST /reset) delivers what is held.
func TestHoldCleanup(t *testing.T) {
	fault := faultID(t)
	toxic := newToxic(t, attrs(fault, `"action": "hold_request", "api": ["EndTxn"], "count": 2`))
	c := newConn(t, toxic)
	c.send(endTxn(1, "x"), heartbeat(2))
	c.quiet(50 * time.Millisecond)
	c.interrupt()
	toxic.Cleanup(c.stub)
	c.recv(cat(endTxn(1, "x"), heartbeat(2)), time.Second)
	if c.stub.Closed() {
		t.Fatal("cleanup closed a live connection")
	}

	// Same, with the client gone before the cleanup: the stub is closed after delivery.
	d := newConn(t, toxic)
	d.send(endTxn(3, "x"))
	close(d.in)
	d.quiet(50 * time.Millisecond)
	d.interrupt()
	toxic.Cleanup(d.stub)
	d.recv(endTxn(3, "x"), time.Second)
	d.closed(time.Second)
	if got := eventNames(t, fault); got != "match:1 hold:1 release:1:removed match:3 hold:3 release:3:removed" {
		t.Fatalf("events: %s", got)
	}
}

// A client that leaves while held does not lose its request: delivered at release, then closed.
func TestHeldDeliveredAfterInputClosed(t *testing.T) {
	toxic := newToxic(t, attrs(faultID(t), `"action": "hold_request", "api": ["EndTxn"], "release_ms": 150`))
	c := newConn(t, toxic)
	c.send(endTxn(1, "x"), heartbeat(2)[:10]) // a partial frame after it, too
	close(c.in)
	c.quiet(80 * time.Millisecond)
	c.recv(cat(endTxn(1, "x"), heartbeat(2)[:10]), time.Second)
	c.closed(time.Second)
}

// nth/count are counted over all toxics of the fault.
func TestNthCount(t *testing.T) {
	fault := faultID(t)
	cfg := attrs(fault, `"action": "hold_request", "api": ["EndTxn"], "nth": 2, "count": 2, "release_ms": 20`)
	a, b := newConn(t, newToxic(t, cfg)), newConn(t, newToxic(t, cfg))
	for corr, c := range []*conn{a, b, a, b, a} {
		c.send(endTxn(int32(corr+1), "x"))
		c.recv(endTxn(int32(corr+1), "x"), time.Second)
	}
	want := "match:2 hold:2 release:2:ms match:3 hold:3 release:3:ms"
	if got := eventNames(t, fault); got != want {
		t.Fatalf("events: %s, want %s", got, want)
	}
}

// drop_response forwards the request and closes the connection right after it.
func TestDropResponse(t *testing.T) {
	fault := faultID(t)
	toxic := newToxic(t, attrs(fault, `"action": "drop_response", "api": ["EndTxn"]`))
	c := newConn(t, toxic)
	c.send(chunks(cat(produce(1, "x", 5000), endTxn(2, "x"), heartbeat(3)), 1000)...)
	c.recv(cat(produce(1, "x", 5000), endTxn(2, "x")), time.Second)
	c.closed(time.Second)
	for i := 0; i < 2000; i++ { // input keeps draining: more than its buffer holds
		c.send(heartbeat(int32(i)))
	}
	close(c.in)
	if got := eventNames(t, fault); got != "match:2 drop_response:2" {
		t.Fatalf("events: %s", got)
	}
}

// duplicate_request sends a byte-identical copy on a connection of its own.
func TestDuplicateRequest(t *testing.T) {
	fault := faultID(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	copies := make(chan []byte, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		var size [4]byte
		if _, err := io.ReadFull(conn, size[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(conn, body); err != nil {
			return
		}
		copies <- cat(size[:], body)
		_, _ = conn.Write(cat(i32(8), i32(2), i32(0))) // a response for it to read
	}()
	toxic := newToxic(t, attrs(fault, fmt.Sprintf(`"action": "duplicate_request", "api": ["Produce"],
		"transactional_id": "x", "upstream": %q`, ln.Addr().String())))
	c := newConn(t, toxic)
	req := produce(2, "x", 100_000)
	all := cat(heartbeat(1), req, produce(3, "y", 10), heartbeat(4))
	c.send(chunks(all, 16<<10)...)
	c.recv(all, time.Second)
	select {
	case got := <-copies:
		if !bytes.Equal(got, req) {
			t.Fatalf("copy differs: %d bytes vs %d", len(got), len(req))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no copy")
	}
	deadline := time.Now().Add(2 * time.Second)
	for eventNames(t, fault) != "match:2 duplicate:2" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := eventNames(t, fault); got != "match:2 duplicate:2" {
		t.Fatalf("events: %s", got)
	}
}

// A connection that does not start like Kafka (TLS here) passes untouched from then on.
func TestUnparsedPassThrough(t *testing.T) {
	fault := faultID(t)
	toxic := newToxic(t, attrs(fault, `"action": "hold_request", "api": ["EndTxn"]`))
	c := newConn(t, toxic)
	tls := []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}
	c.send(tls[:2], tls[2:], endTxn(1, "x"))
	c.recv(cat(tls, endTxn(1, "x")), time.Second)
	evs := eventsOf(t, fault)
	if len(evs) != 1 || evs[0].Event != "unparsed" || evs[0].Count != 1 || evs[0].APIKey != nil {
		t.Fatalf("events: %+v", evs)
	}
}

func TestAttributesValidated(t *testing.T) {
	for _, bad := range []string{`{"action": "explode"}`, `{"api": ["NoSuchApi"]}`,
		`{"release_after_api": "Nope"}`, `{"action": "duplicate_request"}`} {
		if err := json.Unmarshal([]byte(bad), new(KafkaToxic)); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	// Updates change only the attributes they name.
	k := newToxic(t, `{"fault": "f", "api": ["EndTxn"], "nth": 3}`)
	if err := json.Unmarshal([]byte(`{"nth": 4}`), k); err != nil {
		t.Fatal(err)
	}
	out, _ := json.Marshal(k)
	if !strings.Contains(string(out), `"api":["EndTxn"]`) || !strings.Contains(string(out), `"nth":4`) {
		t.Fatalf("after update: %s", out)
	}
}

// End to end through a real toxiproxy server on a free 127.0.0.1 port, in front of a fake
// broker that answers every request with its correlation id.
func TestServerEndToEnd(t *testing.T) {
	broker, got := fakeBroker(t)
	api := startServer(t)
	var proxy struct{ Listen string }
	mustAPI(t, api, "POST", "/proxies", `{"name": "b0", "listen": "127.0.0.1:0", "upstream": "`+broker+`"}`, 201, &proxy)
	addToxic := func(name, fault, rest string) {
		body := fmt.Sprintf(`{"name": %q, "type": "kafka", "stream": "upstream", "attributes": %s}`,
			name, attrs(fault, rest))
		mustAPI(t, api, "POST", "/proxies/b0/toxics", body, 200, nil)
	}
	client := dialClient(t, proxy.Listen)

	// hold, released by an update
	fault := faultID(t)
	addToxic("hold", fault, `"action": "hold_request", "api": ["EndTxn"]`)
	var shown struct{ Attributes KafkaConfig }
	mustAPI(t, api, "GET", "/proxies/b0/toxics/hold", "", 200, &shown)
	if shown.Attributes.Fault != fault || shown.Attributes.Action != actHold {
		t.Fatalf("toxic shown as %+v", shown)
	}
	client.roundTrip(heartbeat(1), time.Second)
	client.send(endTxn(2, "tx"))
	client.noAnswer(200 * time.Millisecond)
	mustAPI(t, api, "POST", "/proxies/b0/toxics/hold", `{"attributes": {"released": true}}`, 200, nil)
	client.answer(2, time.Second)
	mustAPI(t, api, "DELETE", "/proxies/b0/toxics/hold", "", 204, nil)

	// hold, released by POST /reset (the toxic's Cleanup)
	addToxic("hold2", faultID(t), `"action": "hold_request", "api": ["EndTxn"]`)
	client.send(endTxn(3, "tx"))
	client.noAnswer(200 * time.Millisecond)
	mustAPI(t, api, "POST", "/reset", "", 204, nil)
	client.answer(3, time.Second)

	// duplicate_request: the broker sees the request twice, the client one answer
	addToxic("dup", faultID(t), `"action": "duplicate_request", "api": ["Heartbeat"], "upstream": "`+broker+`"`)
	client.roundTrip(heartbeat(4), time.Second)
	deadline := time.Now().Add(2 * time.Second)
	for got.count(4) < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := got.count(4); n != 2 {
		t.Fatalf("broker got request 4 %d times", n)
	}
	client.noAnswer(100 * time.Millisecond)
	mustAPI(t, api, "DELETE", "/proxies/b0/toxics/dup", "", 204, nil)

	// drop_response: the broker gets the request, the client loses the connection
	addToxic("drop", faultID(t), `"action": "drop_response", "api": ["EndTxn"]`)
	client.send(endTxn(5, "tx"))
	if _, err := client.read(time.Second); err == nil {
		t.Fatal("drop_response: got an answer")
	}
	for deadline := time.Now().Add(time.Second); got.count(5) != 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("drop_response: broker did not get the request")
		}
	}

	// A bad attribute is refused.
	if status, body := callAPI(t, api, "POST", "/proxies/b0/toxics",
		`{"type": "kafka", "stream": "upstream", "attributes": {"action": "nope"}}`); status != 400 {
		t.Fatalf("bad action: %d %s", status, body)
	}
	mustAPI(t, api, "DELETE", "/proxies/b0", "", 204, nil)
}

type received struct {
	mu    sync.Mutex
	corrs map[int32]int
}

func (r *received) count(corr int32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.corrs[corr]
}

func fakeBroker(t *testing.T) (string, *received) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got := &received{corrs: map[int32]int{}}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				for {
					frame, err := readFrame(conn)
					if err != nil {
						return
					}
					req, _, _ := parseRequest(frame)
					got.mu.Lock()
					got.corrs[req.CorrelationID]++
					got.mu.Unlock()
					// Real brokers take far longer than the microseconds between toxiproxy's
					// write of a dropped request and its close of this socket; an instant
					// answer could slip through that window.
					time.Sleep(2 * time.Millisecond)
					if _, err := conn.Write(cat(i32(4), i32(req.CorrelationID))); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), got
}

func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	body := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(r, body)
	return cat(size[:], body), err
}

func startServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	go func() { _ = server.Listen(addr) }()
	for i := 0; ; i++ {
		if resp, err := http.Get("http://" + addr + "/version"); err == nil {
			resp.Body.Close()
			return addr
		} else if i > 100 {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func callAPI(t *testing.T, addr, method, path, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

func mustAPI(t *testing.T, addr, method, path, body string, status int, into any) {
	t.Helper()
	got, out := callAPI(t, addr, method, path, body)
	if got != status {
		t.Fatalf("%s %s: %d %s", method, path, got, out)
	}
	if into != nil {
		if err := json.Unmarshal(out, into); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, out)
		}
	}
}

type client struct {
	t *testing.T
	net.Conn
}

func dialClient(t *testing.T, addr string) *client {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &client{t, conn}
}

func (c *client) send(frame []byte) {
	if _, err := c.Write(frame); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) read(timeout time.Duration) (int32, error) {
	_ = c.SetReadDeadline(time.Now().Add(timeout))
	frame, err := readFrame(c)
	if err != nil {
		return 0, err
	}
	return int32(binary.BigEndian.Uint32(frame[4:])), nil
}

func (c *client) answer(corr int32, timeout time.Duration) {
	c.t.Helper()
	got, err := c.read(timeout)
	if err != nil || got != corr {
		c.t.Fatalf("answer: %d %v, want %d", got, err, corr)
	}
}

func (c *client) roundTrip(frame []byte, timeout time.Duration) {
	c.t.Helper()
	c.send(frame)
	c.answer(mustParse(c.t, frame).CorrelationID, timeout)
}

func (c *client) noAnswer(d time.Duration) {
	c.t.Helper()
	if got, err := c.read(d); err == nil {
		c.t.Fatalf("unexpected answer %d", got)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		c.t.Fatalf("connection lost: %v", err)
	}
}
