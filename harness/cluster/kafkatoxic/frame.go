package main

import (
	"encoding/binary"
	"strconv"
	"strings"
)

// Kafka request framing: int32 size, then a request header, then the body.
// Only what the toxic needs to decide is parsed: the header and, for the
// transactional APIs, the transactional id at the start of the body.

const (
	maxFrameSize = 100 << 20 // larger than any sane request: treat as "not Kafka"
	maxAPIKey    = 1000
	minFrameSize = 8 // api_key + api_version + correlation_id
	never        = 1<<15 - 1
)

type apiInfo struct {
	name         string
	flexibleFrom int16 // first version using request header v2; never = not flexible
}

// apiTable is indexed by api key. The first flexible versions were checked against
// Kafka's clients/src/main/resources/common/message/*Request.json (trunk, Oct 2024).
var apiTable = [...]apiInfo{
	0:  {"Produce", 9},
	1:  {"Fetch", 12},
	2:  {"ListOffsets", 6},
	3:  {"Metadata", 9},
	4:  {"LeaderAndIsr", 4},
	5:  {"StopReplica", 2},
	6:  {"UpdateMetadata", 6},
	7:  {"ControlledShutdown", 3},
	8:  {"OffsetCommit", 8},
	9:  {"OffsetFetch", 6},
	10: {"FindCoordinator", 3},
	11: {"JoinGroup", 6},
	12: {"Heartbeat", 4},
	13: {"LeaveGroup", 4},
	14: {"SyncGroup", 4},
	15: {"DescribeGroups", 5},
	16: {"ListGroups", 3},
	17: {"SaslHandshake", never},
	18: {"ApiVersions", 3},
	19: {"CreateTopics", 5},
	20: {"DeleteTopics", 4},
	21: {"DeleteRecords", 2},
	22: {"InitProducerId", 2},
	23: {"OffsetForLeaderEpoch", 4},
	24: {"AddPartitionsToTxn", 3},
	25: {"AddOffsetsToTxn", 3},
	26: {"EndTxn", 3},
	27: {"WriteTxnMarkers", 1},
	28: {"TxnOffsetCommit", 3},
	29: {"DescribeAcls", 2},
	30: {"CreateAcls", 2},
	31: {"DeleteAcls", 2},
	32: {"DescribeConfigs", 4},
	33: {"AlterConfigs", 2},
	34: {"AlterReplicaLogDirs", 2},
	35: {"DescribeLogDirs", 2},
	36: {"SaslAuthenticate", 2},
	37: {"CreatePartitions", 2},
	38: {"CreateDelegationToken", 2},
	39: {"RenewDelegationToken", 2},
	40: {"ExpireDelegationToken", 2},
	41: {"DescribeDelegationToken", 2},
	42: {"DeleteGroups", 2},
	43: {"ElectLeaders", 2},
	44: {"IncrementalAlterConfigs", 1},
	45: {"AlterPartitionReassignments", 0},
	46: {"ListPartitionReassignments", 0},
	47: {"OffsetDelete", never},
	48: {"DescribeClientQuotas", 1},
	49: {"AlterClientQuotas", 1},
	50: {"DescribeUserScramCredentials", 0},
	51: {"AlterUserScramCredentials", 0},
	52: {"Vote", 0},
	53: {"BeginQuorumEpoch", 1}, // v0 is not flexible
	54: {"EndQuorumEpoch", 1},   // v0 is not flexible
	55: {"DescribeQuorum", 0},
	56: {"AlterPartition", 0},
	57: {"UpdateFeatures", 0},
	58: {"Envelope", 0},
	59: {"FetchSnapshot", 0},
	60: {"DescribeCluster", 0},
	61: {"DescribeProducers", 0},
	62: {"BrokerRegistration", 0},
	63: {"BrokerHeartbeat", 0},
	64: {"UnregisterBroker", 0},
	65: {"DescribeTransactions", 0},
	66: {"ListTransactions", 0},
	67: {"AllocateProducerIds", 0},
	68: {"ConsumerGroupHeartbeat", 0},
	69: {"ConsumerGroupDescribe", 0},
	70: {"ControllerRegistration", 0},
	71: {"GetTelemetrySubscriptions", 0},
	72: {"PushTelemetry", 0},
	73: {"AssignReplicasToDirs", 0},
	74: {"ListClientMetricsResources", 0},
	75: {"DescribeTopicPartitions", 0},
	76: {"ShareGroupHeartbeat", 0},
	77: {"ShareGroupDescribe", 0},
	78: {"ShareFetch", 0},
	79: {"ShareAcknowledge", 0},
	80: {"AddRaftVoter", 0},
	81: {"RemoveRaftVoter", 0},
	82: {"UpdateRaftVoter", 0},
	83: {"InitializeShareGroupState", 0},
	84: {"ReadShareGroupState", 0},
	85: {"WriteShareGroupState", 0},
	86: {"DeleteShareGroupState", 0},
	87: {"ReadShareGroupStateSummary", 0},
}

// Api keys whose body starts with a transactional id.
const (
	apiProduce            = 0
	apiInitProducerID     = 22
	apiAddPartitionsToTxn = 24
	apiAddOffsetsToTxn    = 25
	apiEndTxn             = 26
	apiTxnOffsetCommit    = 28
	apiControlledShutdown = 7
)

func apiName(key int16) string {
	if key >= 0 && int(key) < len(apiTable) && apiTable[key].name != "" {
		return apiTable[key].name
	}
	return "api" + strconv.Itoa(int(key))
}

// apiKey resolves a name from apiTable, or "api<N>", to its key.
func apiKey(name string) (int16, bool) {
	for k, a := range apiTable {
		if a.name == name {
			return int16(k), true
		}
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(name, "api")); err == nil &&
		strings.HasPrefix(name, "api") && n >= 0 && n <= maxAPIKey {
		return int16(n), true
	}
	return 0, false
}

// flexible reports whether (key, version) uses request header v2 and compact body encodings.
// Keys beyond the table are assumed flexible: every API added since KIP-482 (Kafka 2.4) is
// flexible from v0. A wrong guess only garbles client_id, never the framing.
func flexible(key, version int16) bool {
	if int(key) < len(apiTable) && apiTable[key].name != "" {
		return version >= apiTable[key].flexibleFrom
	}
	return true
}

// Request is a parsed request prefix. ClientID and TxnID alias the parsed bytes: copy them
// before the buffer is reused. Empty means null, empty or absent alike.
type Request struct {
	Size          int32 // bytes after the size field
	APIKey        int16
	APIVersion    int16
	CorrelationID int32
	ClientID      []byte
	TxnID         []byte
}

// FrameLen is the whole frame's length, size field included.
func (r *Request) FrameLen() int64 { return 4 + int64(r.Size) }

// parseRequest parses the request whose size field starts at b[0]; b may be any prefix of
// the stream from there. ok: the header (and transactional id, if the api has one) parsed.
// needMore: b is too short to tell yet. Neither: this is not a Kafka request.
// A malformed body (after a good header) still yields ok with an empty TxnID.
func parseRequest(b []byte) (req Request, ok, needMore bool) {
	if len(b) < 4 {
		return req, false, true
	}
	req.Size = int32(binary.BigEndian.Uint32(b))
	if req.Size < minFrameSize || req.Size > maxFrameSize {
		return req, false, false
	}
	frame := b[4:]
	complete := len(frame) >= int(req.Size)
	if complete {
		frame = frame[:req.Size]
	}
	r := reader{b: frame}
	req.APIKey, req.APIVersion, req.CorrelationID = r.int16(), r.int16(), r.int32()
	if r.short {
		return req, false, !complete
	}
	if req.APIKey < 0 || req.APIKey > maxAPIKey || req.APIVersion < 0 {
		return req, false, false
	}
	flex := flexible(req.APIKey, req.APIVersion)
	if !(req.APIKey == apiControlledShutdown && req.APIVersion == 0) { // header v0 has no client_id
		req.ClientID = r.nullableString(false)
	}
	if flex {
		r.skipTaggedFields()
	}
	if r.short || r.bad {
		return req, false, !complete && !r.bad
	}
	req.TxnID = r.txnID(req.APIKey, req.APIVersion, flex)
	if r.short && !complete {
		return req, false, true
	}
	if r.short || r.bad {
		req.TxnID = nil
	}
	return req, true, false
}

// reader decodes Kafka primitives; running off the end sets short, a nonsense length sets bad.
type reader struct {
	b          []byte
	off        int
	short, bad bool
}

func (r *reader) take(n int) []byte {
	if r.short || r.bad {
		return nil
	}
	if n < 0 {
		r.bad = true
		return nil
	}
	if len(r.b)-r.off < n {
		r.short = true
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

func (r *reader) int16() int16 {
	if s := r.take(2); s != nil {
		return int16(binary.BigEndian.Uint16(s))
	}
	return 0
}

func (r *reader) int32() int32 {
	if s := r.take(4); s != nil {
		return int32(binary.BigEndian.Uint32(s))
	}
	return 0
}

func (r *reader) uvarint() uint64 {
	if r.short || r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	switch {
	case n == 0:
		r.short = true
	case n < 0:
		r.bad = true
	default:
		r.off += n
	}
	return v
}

// nullableString reads STRING / NULLABLE_STRING (int16 length, -1 null) or, when compact,
// COMPACT_(NULLABLE_)STRING (uvarint length+1, 0 null).
func (r *reader) nullableString(compact bool) []byte {
	var n int
	if compact {
		u := r.uvarint()
		if u > maxFrameSize {
			r.bad = true
			return nil
		}
		n = int(u) - 1
	} else {
		n = int(r.int16())
	}
	if n == -1 || r.short || r.bad {
		return nil
	}
	return r.take(n)
}

func (r *reader) skipTaggedFields() {
	count := r.uvarint()
	for i := uint64(0); i < count && !r.short && !r.bad; i++ {
		r.uvarint() // tag
		size := r.uvarint()
		if size > maxFrameSize {
			r.bad = true
			return
		}
		r.take(int(size))
	}
}

// txnID reads the transactional id at the start of the body, for the apis that have one.
func (r *reader) txnID(key, version int16, flex bool) []byte {
	switch key {
	case apiProduce:
		if version < 3 {
			return nil
		}
	case apiAddPartitionsToTxn:
		if version >= 4 { // a compact array of transactions; take the first one's id
			if n := r.uvarint(); n < 2 { // 0 = null array, 1 = empty
				return nil
			}
		}
	case apiInitProducerID, apiAddOffsetsToTxn, apiEndTxn, apiTxnOffsetCommit:
	default:
		return nil
	}
	return r.nullableString(flex)
}
