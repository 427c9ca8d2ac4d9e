package toolbin

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// errMissing is the notFound the tests pass to Find.
var errMissing = errors.New("missing")

func TestFind(t *testing.T) {
	dir := t.TempDir()
	onPath := filepath.Join(dir, "toolbin-test-program")
	require.NoError(t, os.WriteFile(onPath, []byte("#!/bin/sh\n"), 0o755))

	tests := []struct {
		name    string
		env     string // the value of TOOLBIN_TEST_BIN
		path    string // PATH
		want    string
		wantErr error // tested with errors.Is when set
	}{
		{name: "environment variable", env: onPath, path: "", want: onPath},
		{name: "environment variable naming nothing", env: filepath.Join(dir, "none"), path: dir, wantErr: os.ErrNotExist},
		{name: "PATH", path: dir, want: onPath},
		{name: "nowhere", path: t.TempDir(), wantErr: errMissing},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("TOOLBIN_TEST_BIN", tt.env)
			t.Setenv("PATH", tt.path)
			got, err := Find("TOOLBIN_TEST_BIN", "toolbin-test-program", errMissing)
			if tt.wantErr != nil {
				require.ErrorIs(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestModuleRootPassesNestedModules(t *testing.T) {
	want, err := filepath.Abs(filepath.Join("..", "..", ".."))
	require.NoError(t, err)
	t.Chdir(filepath.Join(want, "internal", "testkit", "cluster", "server"))
	got, err := ModuleRoot()
	require.NoError(t, err)
	assert.Equal(t, want, got)
}
