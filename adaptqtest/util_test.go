package adaptqtest_test

import "fmt"

var sprintf = fmt.Sprintf
