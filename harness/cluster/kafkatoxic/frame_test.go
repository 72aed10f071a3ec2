package main

import (
	"bytes"
	"encoding/binary"
	"testing"
)

// Encoders for building requests in tests.

func i16(v int16) []byte   { return binary.BigEndian.AppendUint16(nil, uint16(v)) }
func i32(v int32) []byte   { return binary.BigEndian.AppendUint32(nil, uint32(v)) }
func uvar(v uint64) []byte { return binary.AppendUvarint(nil, v) }

// str encodes STRING (int16 length) or COMPACT_STRING; null encodes the null string.
func str(s string, compact, null bool) []byte {
	switch {
	case compact && null:
		return uvar(0)
	case compact:
		return append(uvar(uint64(len(s)+1)), s...)
	case null:
		return i16(-1)
	}
	return append(i16(int16(len(s))), s...)
}

type reqSpec struct {
	key, ver    int16
	corr        int32
	client      string
	nullClient  bool
	tagged      [][]byte // header tagged fields' payloads (flexible only)
	txn         string
	nullTxn     bool
	pad         int // body bytes after the transactional id
	emptyTxnArr bool
}

// frame builds a whole request: size, header, transactional id where the api has one, padding.
func (s reqSpec) frame() []byte {
	flex := flexible(s.key, s.ver)
	b := append(i16(s.key), i16(s.ver)...)
	b = append(b, i32(s.corr)...)
	if !(s.key == apiControlledShutdown && s.ver == 0) {
		b = append(b, str(s.client, false, s.nullClient)...)
	}
	if flex {
		b = append(b, uvar(uint64(len(s.tagged)))...)
		for tag, payload := range s.tagged {
			b = append(b, uvar(uint64(tag))...)
			b = append(b, uvar(uint64(len(payload)))...)
			b = append(b, payload...)
		}
	}
	switch {
	case s.key == apiProduce && s.ver >= 3, s.key == apiInitProducerID, s.key == apiEndTxn,
		s.key == apiAddOffsetsToTxn, s.key == apiTxnOffsetCommit,
		s.key == apiAddPartitionsToTxn && s.ver < 4:
		b = append(b, str(s.txn, flex, s.nullTxn)...)
	case s.key == apiAddPartitionsToTxn:
		if s.emptyTxnArr {
			b = append(b, uvar(1)...)
		} else {
			b = append(b, uvar(2)...)
			b = append(b, str(s.txn, true, false)...)
		}
	}
	b = append(b, bytes.Repeat([]byte{0xab}, s.pad)...)
	return append(i32(int32(len(b))), b...)
}

func mustParse(t *testing.T, b []byte) Request {
	t.Helper()
	req, ok, more := parseRequest(b)
	if !ok || more {
		t.Fatalf("parseRequest: ok=%v needMore=%v", ok, more)
	}
	if req.FrameLen() != int64(len(b)) {
		t.Fatalf("FrameLen %d, frame is %d bytes", req.FrameLen(), len(b))
	}
	return req
}

func TestHeaderV1(t *testing.T) {
	b := reqSpec{key: 0, ver: 8, corr: 42, client: "producer-1", txn: "tx-a", pad: 30}.frame()
	req := mustParse(t, b)
	if req.APIKey != 0 || req.APIVersion != 8 || req.CorrelationID != 42 ||
		string(req.ClientID) != "producer-1" || string(req.TxnID) != "tx-a" {
		t.Fatalf("got %+v", req)
	}
}

func TestHeaderV2TaggedFields(t *testing.T) {
	b := reqSpec{key: 0, ver: 11, corr: 7, client: "c", txn: "tx-b",
		tagged: [][]byte{{1, 2, 3}, bytes.Repeat([]byte{9}, 200)}, pad: 10}.frame()
	req := mustParse(t, b)
	if req.CorrelationID != 7 || string(req.ClientID) != "c" || string(req.TxnID) != "tx-b" {
		t.Fatalf("got %+v", req)
	}
}

func TestHeaderNullClientAndV0(t *testing.T) {
	req := mustParse(t, reqSpec{key: 26, ver: 3, corr: 1, nullClient: true, txn: "t"}.frame())
	if req.ClientID != nil || string(req.TxnID) != "t" {
		t.Fatalf("null client: got %+v", req)
	}
	// ControlledShutdown v0 has header v0: no client id at all.
	req = mustParse(t, reqSpec{key: 7, ver: 0, corr: 5, pad: 4}.frame())
	if req.CorrelationID != 5 || req.ClientID != nil {
		t.Fatalf("header v0: got %+v", req)
	}
}

func TestTransactionalIDs(t *testing.T) {
	for _, s := range []reqSpec{
		{key: 26, ver: 0}, {key: 26, ver: 2}, {key: 26, ver: 3}, {key: 26, ver: 5}, // EndTxn
		{key: 25, ver: 0}, {key: 25, ver: 3}, {key: 25, ver: 4}, // AddOffsetsToTxn
		{key: 28, ver: 0}, {key: 28, ver: 3}, // TxnOffsetCommit
		{key: 22, ver: 0}, {key: 22, ver: 1}, {key: 22, ver: 2}, {key: 22, ver: 5}, // InitProducerId
		{key: 0, ver: 3}, {key: 0, ver: 8}, {key: 0, ver: 9}, {key: 0, ver: 11}, // Produce
		{key: 24, ver: 0}, {key: 24, ver: 2}, {key: 24, ver: 3}, // AddPartitionsToTxn
		{key: 24, ver: 4}, {key: 24, ver: 5}, // AddPartitionsToTxn, array of transactions
	} {
		s.client, s.txn, s.pad = "client", "txn-"+apiName(s.key), 20
		req := mustParse(t, s.frame())
		if string(req.TxnID) != s.txn || string(req.ClientID) != "client" {
			t.Errorf("%s v%d: txn %q client %q", apiName(s.key), s.ver, req.TxnID, req.ClientID)
		}
	}
	for _, s := range []reqSpec{
		{key: 22, ver: 1, nullTxn: true}, {key: 22, ver: 4, nullTxn: true}, // non-transactional producer
		{key: 0, ver: 7, nullTxn: true}, {key: 0, ver: 10, nullTxn: true},
		{key: 0, ver: 2, txn: "not-in-v2"},                        // Produce v2 has no transactional id
		{key: 24, ver: 4, emptyTxnArr: true},                      // empty transactions array
		{key: 12, ver: 4, txn: "heartbeat-has-none", client: "x"}, // not a transactional api
	} {
		req := mustParse(t, s.frame())
		if len(req.TxnID) != 0 {
			t.Errorf("%s v%d: txn %q, want none", apiName(s.key), s.ver, req.TxnID)
		}
	}
}

// Every prefix of a frame either asks for more or gives the full answer; never "not Kafka".
func TestPrefixes(t *testing.T) {
	for _, s := range []reqSpec{
		{key: 24, ver: 5, corr: 3, client: "cl", txn: "tx", tagged: [][]byte{{1}}, pad: 5},
		{key: 26, ver: 1, corr: 3, client: "cl", txn: "tx"},
		{key: 3, ver: 12, corr: 3, client: "cl", pad: 3},
	} {
		b := s.frame()
		want := mustParse(t, b)
		for n := 0; n < len(b); n++ {
			req, ok, more := parseRequest(b[:n])
			switch {
			case more:
			case ok:
				if req.CorrelationID != want.CorrelationID || !bytes.Equal(req.TxnID, want.TxnID) {
					t.Fatalf("prefix %d: got %+v want %+v", n, req, want)
				}
			default:
				t.Fatalf("prefix %d of %s: not Kafka", n, apiName(s.key))
			}
		}
	}
}

// Decisions need only the header and transactional id, not the whole frame.
func TestDecidesBeforeFrameEnd(t *testing.T) {
	b := reqSpec{key: 0, ver: 9, corr: 9, client: "p", txn: "tx", pad: 1 << 20}.frame()
	req, ok, _ := parseRequest(b[:64])
	if !ok || string(req.TxnID) != "tx" || req.FrameLen() != int64(len(b)) {
		t.Fatalf("got ok=%v %+v", ok, req)
	}
}

func TestUnparsable(t *testing.T) {
	for name, b := range map[string][]byte{
		"tls":       {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03},
		"negative":  append(i32(-5), make([]byte, 10)...),
		"too big":   i32(maxFrameSize + 1),
		"too small": append(i32(3), 0, 0, 0),
		"api key":   append(i32(12), append(i16(2000), make([]byte, 10)...)...),
		"version":   append(i32(12), append(append(i16(0), i16(-1)...), make([]byte, 8)...)...),
		// client_id length runs past the end of a complete frame
		"client id": append(i32(10), append(append(append(i16(18), i16(0)...), i32(1)...), i16(50)...)...),
	} {
		if _, ok, more := parseRequest(b); ok || more {
			t.Errorf("%s: ok=%v needMore=%v, want not Kafka", name, ok, more)
		}
	}
	// A malformed body after a good header is still a request, without a transactional id.
	b := append(i32(12), append(append(append(i16(26), i16(0)...), i32(1)...), append(i16(0), i16(90)...)...)...)
	if req, ok, _ := parseRequest(b); !ok || req.TxnID != nil || req.APIKey != 26 {
		t.Errorf("bad body: ok=%v %+v", ok, req)
	}
}

func TestAPINames(t *testing.T) {
	for name, key := range map[string]int16{"Produce": 0, "EndTxn": 26, "AddPartitionsToTxn": 24,
		"UpdateRaftVoter": 82, "api999": 999, "api26": 26} {
		if k, ok := apiKey(name); !ok || k != key {
			t.Errorf("apiKey(%q) = %d, %v", name, k, ok)
		}
	}
	for _, name := range []string{"", "bogus", "api", "api-1", "api1001", "endtxn"} {
		if _, ok := apiKey(name); ok {
			t.Errorf("apiKey(%q) resolved", name)
		}
	}
	if apiName(26) != "EndTxn" || apiName(500) != "api500" {
		t.Errorf("apiName: %s %s", apiName(26), apiName(500))
	}
}

func TestFlexible(t *testing.T) {
	for _, c := range []struct {
		key, ver int16
		want     bool
	}{{0, 8, false}, {0, 9, true}, {17, 1, false}, {18, 2, false}, {18, 3, true},
		{26, 2, false}, {26, 3, true}, {53, 0, false}, {53, 1, true}, {52, 0, true},
		{60, 0, true}, {82, 0, true}, {500, 0, true}} {
		if flexible(c.key, c.ver) != c.want {
			t.Errorf("flexible(%s, %d) != %v", apiName(c.key), c.ver, c.want)
		}
	}
}
