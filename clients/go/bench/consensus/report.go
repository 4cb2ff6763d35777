package main

import (
	"os"
	"strings"
)

// The report is shared: the Go bench writes the etcd section and the Java
// bench (clients/java/dlock-bench, ConsensusBench) the ZooKeeper section,
// each between its own markers; the rest of the file is kept as it is.
const reportHead = `# dlock beside etcd and ZooKeeper

Written by the benches of issue 41: ` + "`make go-bench`" + ` (dlock's Go client beside etcd's ` + "`concurrency`" + ` package) and
` + "`make java-bench`" + ` (dlock's Java client beside Apache Curator's recipes on ZooKeeper), each between its markers below.
What each system guarantees is in [design.md](design.md#dlock-beside-etcd-and-zookeeper).

`

// writeSection replaces the text between <!-- name:begin --> and
// <!-- name:end --> in path (adding the markers at the end when absent,
// and the file when missing) with body.
func writeSection(path, name, body string) error {
	begin, end := "<!-- "+name+":begin -->\n", "<!-- "+name+":end -->\n"
	old, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	doc := string(old)
	if doc == "" {
		doc = reportHead
	}
	section := begin + body + end
	i := strings.Index(doc, begin)
	j := strings.Index(doc, end)
	if i >= 0 && j > i {
		doc = doc[:i] + section + doc[j+len(end):]
	} else {
		if !strings.HasSuffix(doc, "\n\n") {
			doc += "\n"
		}
		doc += section
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return err
	}
	os.Stderr.WriteString("wrote the " + name + " section of " + path + "\n")
	return nil
}
