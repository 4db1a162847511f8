package postgres

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestClientClockOnlyThroughWallNow (issue 25): time decisions about a
// message (visible, expired) are the server's, made with now() in SQL, so
// workers whose clocks disagree still agree. The driver's code reads the
// client's clock only in wallNow, which spaces its own work (notifications,
// sweeps) and which TestFaults/ClockSkew runs 60 s ahead.
func TestClientClockOnlyThroughWallNow(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if ok && fn.Name.Name == "wallNow" && fn.Recv == nil {
				continue
			}
			ast.Inspect(d, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "time" {
					switch sel.Sel.Name {
					case "Now", "Since", "Until":
						t.Errorf("%s: time.%s reads the client's clock outside wallNow", fset.Position(sel.Pos()), sel.Sel.Name)
					}
				}
				return true
			})
		}
	}
}
