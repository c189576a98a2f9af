// The go lane's warm-up program: it imports the standard packages toolkits
// commonly use, so that building it once fills the shared build cache with
// their wasip1/wasm compilations. It is never run.
package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"
)

func main() {
	flag.Parse()
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 1, ' ', 0)
	r := csv.NewReader(bufio.NewReader(io.MultiReader(bytes.NewReader(nil), os.Stdin)))
	_, err := r.ReadAll()
	b, _ := json.Marshal(map[string]any{"e": errors.Is(err, io.EOF), "t": time.Now().Unix()})
	s := strings.ToUpper(string(b)) + strconv.Itoa(int(math.Sqrt(4))) + base64.StdEncoding.EncodeToString(b) + hex.EncodeToString(b)
	xs := []string{filepath.Base(s), regexp.MustCompile(`\d+`).FindString(s)}
	sort.Strings(xs)
	fmt.Fprintln(w, xs, unicode.IsUpper('A'), utf8.RuneCountInString(s))
	w.Flush()
}
