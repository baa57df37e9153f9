package jepsen

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"
)

// Client sends operations straight to nodes (not through the proxies).
type Client struct {
	c       *Cluster
	http    *http.Client
	Timeout time.Duration

	mu sync.Mutex
	// Answers that the API does not allow for (an unexpected status, a
	// body that does not decode): "what: example" → count. They fail the test.
	Anomalies map[string]int
	// Deviations in form only, accepted (AcceptOpenraftResult).
	Deviations map[string]int
}

// NewClient with a per-operation timeout.
func (c *Cluster) NewClient(timeout time.Duration) *Client {
	// A fresh connection per request: a refused connection then means
	// the request was certainly not sent.
	return &Client{c: c, http: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}, Timeout: timeout, Anomalies: map[string]int{}, Deviations: map[string]int{}}
}

// AcceptOpenraftResult (env MMAPKIT_JEPSEN_ACCEPT_OPENRAFT_RESULT=1)
// reports the two known deviations of POST /kv/write from the API (its
// 200 answer wrapped in openraft's {"Ok":...}; "not applied" as a 200
// {"Err":{"APIError":{"ForwardToLeader":...}}}) as notes instead of
// failing the test. Both are decoded either way.
var AcceptOpenraftResult = os.Getenv("MMAPKIT_JEPSEN_ACCEPT_OPENRAFT_RESULT") == "1"

// deviation is an answer that differs from the API in form only.
func (cl *Client) deviation(what string) {
	cl.mu.Lock()
	if AcceptOpenraftResult {
		cl.Deviations[what]++
	} else {
		cl.Anomalies[what]++
	}
	cl.mu.Unlock()
}

func (cl *Client) anomaly(what string) {
	cl.mu.Lock()
	cl.Anomalies[what]++
	cl.mu.Unlock()
}

// TakeAnomalies returns and clears the anomalies and accepted deviations seen.
func (cl *Client) TakeAnomalies() (anomalies, deviations map[string]int) {
	cl.mu.Lock()
	defer cl.mu.Unlock()
	a, d := cl.Anomalies, cl.Deviations
	cl.Anomalies, cl.Deviations = map[string]int{}, map[string]int{}
	return a, d
}

type jsonVal = *string

func toVal(p jsonVal) Val {
	if p == nil {
		return Absent
	}
	return Some(*p)
}

func fromVal(v Val) jsonVal {
	if !v.Present {
		return nil
	}
	s := v.S
	return &s
}

// notSent tells whether a request failed before any of it could reach the
// server (the connection was refused or could not be made).
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func shortErr(err error) string {
	s := err.Error()
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(s, "Client.Timeout") || strings.Contains(s, "deadline exceeded"):
		return "timeout"
	case strings.Contains(s, "connection reset"):
		return "reset"
	case strings.Contains(s, "EOF"):
		return "eof"
	case strings.Contains(s, "refused"):
		return "refused"
	}
	if len(s) > 80 {
		s = s[:80]
	}
	return s
}

// Do performs one operation on node in.Node and classifies its outcome.
func (cl *Client) Do(in Input) Output {
	node := cl.c.Nodes[in.Node-1]
	ctx, cancel := context.WithTimeout(context.Background(), cl.Timeout)
	defer cancel()
	var req *http.Request
	var err error
	if in.Kind == OpGet {
		q := "/kv/get?key=" + url.QueryEscape(in.Key)
		if in.Stale {
			q += "&stale=true"
		}
		req, err = http.NewRequestWithContext(ctx, "GET", "http://"+node.Addr()+q, nil)
	} else {
		var body any
		switch in.Kind {
		case OpPut:
			body = map[string]any{"Set": map[string]any{"key": in.Key, "value": in.Value.S}}
		case OpDelete:
			body = map[string]any{"Delete": map[string]any{"key": in.Key}}
		case OpCas:
			body = map[string]any{"Cas": map[string]any{"key": in.Key, "expected": fromVal(in.Expected), "value": fromVal(in.Value)}}
		}
		b, _ := json.Marshal(body)
		req, err = http.NewRequestWithContext(ctx, "POST", "http://"+node.Addr()+"/kv/write", bytes.NewReader(b))
		if req != nil {
			req.Header.Set("Content-Type", "application/json")
		}
	}
	if err != nil {
		return Output{Outcome: Fail, Err: err.Error()}
	}
	req.Header.Set("Authorization", "Bearer "+cl.c.Token)
	resp, err := cl.http.Do(req)
	if err != nil {
		if notSent(err) {
			return Output{Outcome: Fail, Err: shortErr(err)}
		}
		return Output{Outcome: Unknown, Err: shortErr(err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		// The answer was lost: for a 200 the operation happened, but
		// what it returned is unknown.
		return Output{Outcome: Unknown, Err: "body: " + shortErr(err)}
	}
	text := strings.TrimSpace(string(body))
	if resp.StatusCode == 200 {
		if in.Kind == OpGet {
			var r struct {
				Key   string  `json:"key"`
				Value jsonVal `json:"value"`
			}
			if err := json.Unmarshal(body, &r); err != nil || r.Key != in.Key {
				cl.anomaly(fmt.Sprintf("get: 200 with a body that does not decode as {key, value} of the key asked: %.120s", text))
				return Output{Outcome: Unknown, Err: "bad body"}
			}
			return Output{Outcome: Ok, Value: toVal(r.Value)}
		}
		ans, how := decodeWrite(body)
		switch how {
		case "spec":
		case "wrapped":
			// The documented form: openraft's Result, {"Ok":{"log_id","data"}}.
		case "forward":
			// openraft's ForwardToLeader: the entry was not appended.
			cl.deviation(fmt.Sprintf(`write: not applied, answered 200 with openraft's {"Err":{"APIError":{"ForwardToLeader":...}}}, not a 4xx/503: %.120s`, text))
			return Output{Outcome: Fail, Err: "200 ForwardToLeader"}
		case "err":
			// Another openraft error (e.g. Fatal): it may have been appended.
			cl.anomaly(fmt.Sprintf(`write: 200 with openraft's {"Err":...} (outcome unknown), not a 4xx/5xx: %.120s`, text))
			return Output{Outcome: Unknown, Err: "200 Err"}
		default:
			cl.anomaly(fmt.Sprintf("write: 200 with a body that does not decode as {log_id, data: {previous, ok}}: %.120s", text))
			return Output{Outcome: Unknown, Err: "bad body"}
		}
		if in.Kind != OpCas && !*ans.Ok {
			cl.anomaly(fmt.Sprintf("write: %s answered ok=false: %.120s", in.Kind, text))
		}
		return Output{Outcome: Ok, Value: toVal(ans.Previous), CasOk: *ans.Ok}
	}
	errText := fmt.Sprintf("HTTP %d: %.60s", resp.StatusCode, text)
	switch {
	case resp.StatusCode == 503 && strings.HasPrefix(strings.ToLower(text), "no quorum"):
		if in.Kind == OpGet || strings.Contains(strings.ToLower(text), "definitely not applied") {
			return Output{Outcome: Fail, Err: errText}
		}
		return Output{Outcome: Unknown, Err: errText}
	case resp.StatusCode >= 500:
		if strings.Contains(strings.ToLower(text), "definitely not applied") {
			return Output{Outcome: Fail, Err: errText}
		}
		return Output{Outcome: Unknown, Err: errText}
	case resp.StatusCode >= 400:
		// Not applied; but the workload never sends a request the API
		// should refuse (values are small, requests well-formed).
		cl.anomaly(fmt.Sprintf("%s: HTTP %d: %.120s", in.Kind, resp.StatusCode, text))
		return Output{Outcome: Fail, Err: errText}
	default:
		cl.anomaly(fmt.Sprintf("%s: HTTP %d: %.120s", in.Kind, resp.StatusCode, text))
		return Output{Outcome: Unknown, Err: errText}
	}
}

type writeData struct {
	Previous jsonVal `json:"previous"`
	Ok       *bool   `json:"ok"`
}

type writeAnswer struct {
	LogID json.RawMessage `json:"log_id"`
	Data  *writeData      `json:"data"`
}

// decodeWrite decodes a 200 answer of POST /kv/write: "spec" (the API's
// {"log_id", "data": {"previous", "ok"}}), "wrapped" (the same inside
// openraft's {"Ok": ...}), "err" (openraft's {"Err": ...}) or "bad".
func decodeWrite(body []byte) (writeData, string) {
	var a writeAnswer
	if json.Unmarshal(body, &a) == nil && a.Data != nil && a.Data.Ok != nil && len(a.LogID) > 0 {
		return *a.Data, "spec"
	}
	var w struct {
		Ok  *writeAnswer    `json:"Ok"`
		Err json.RawMessage `json:"Err"`
	}
	if json.Unmarshal(body, &w) == nil {
		if w.Ok != nil && w.Ok.Data != nil && w.Ok.Data.Ok != nil {
			return *w.Ok.Data, "wrapped"
		}
		if len(w.Err) > 0 {
			var e struct {
				APIError struct {
					ForwardToLeader json.RawMessage
				}
			}
			if json.Unmarshal(w.Err, &e) == nil && len(e.APIError.ForwardToLeader) > 0 {
				return writeData{}, "forward"
			}
			return writeData{}, "err"
		}
	}
	return writeData{}, "bad"
}
