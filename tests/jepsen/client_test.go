package jepsen

import "testing"

func TestDecodeWrite(t *testing.T) {
	for body, want := range map[string]string{
		`{"log_id":{"leader_id":{"term":1,"node_id":1},"index":3},"data":{"previous":null,"ok":true}}`:                          "spec",
		`{"Ok":{"log_id":{"leader_id":{"term":1,"node_id":1},"index":3},"data":{"previous":"a","ok":false},"membership":null}}`: "wrapped",
		`{"Err":{"APIError":{"ForwardToLeader":{"leader_id":null,"leader_node":null}}}}`:                                        "forward",
		`{"Err":{"Fatal":"Stopped"}}`: "err",
		`{"data":{}}`:                 "bad",
	} {
		if _, got := decodeWrite([]byte(body)); got != want {
			t.Errorf("%s: got %s, want %s", body, got, want)
		}
	}
}
