package canonical_test

import (
	"strconv"
	"testing"

	"github.com/entityflow/entityflow/contracts/canonical"
)

// The canonical bytes are pinned: derived event IDs and request fingerprints
// are hashes of them, so any change here changes those.
func TestJSON(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{" {\n\t\"b\" : [ 1 , 2 ] ,\r\n \"a\":{\"d\":null,\"c\":true} }\n", `{"a":{"c":true,"d":null},"b":[1,2]}`},
		{`[1e3, -0.0, 1.50, 12345678901234567890]`, `[1e3,-0.0,1.50,12345678901234567890]`},
		{`"\u006frder <&> \u00e9"`, `"order <&> é"`},
		{`"\ud83d\ude00 \u0000 \/"`, `"😀 \u0000 /"`},
		{`{"a":1,"a":2}`, `{"a":2}`},
		{`null`, `null`},
		{`""`, `""`},
	} {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			got, err := canonical.JSON([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("JSON(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}

func TestJSONRefusesAllButOneValue(t *testing.T) {
	for _, in := range []string{``, ` `, `{`, `{"a":1} {"b":2}`, `{"a":1}x`, `nope`, `{'a':1}`} {
		if got, err := canonical.JSON([]byte(in)); err == nil {
			t.Errorf("JSON(%q) = %s, want an error", in, got)
		}
	}
}
