# test/t/023_docs_match_code.pl — the reference pages against the code:
# every cagra.* setting in pg_settings and every reloption of the access
# method has a row in docs/reference.md with the default and the range the
# server has (and index.md's settings table the defaults); every cagra_*
# function and every column of the extension's views and result rows is in
# reference.md; every SQLSTATE the C++ code raises appears in
# docs/troubleshooting.md.  Reads the checkout named by CAGRA_SRC (docs/ and
# src/).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $src = $ENV{CAGRA_SRC} // '.';
my $reference = slurp_file("$src/docs/reference.md");
my $troubleshooting = slurp_file("$src/docs/troubleshooting.md");

# The text of a "## " section of a page, up to the next "## " heading.
sub section
{
	my ($page, $title) = @_;
	return $page =~ /^## \Q$title\E\n(.*?)(?=^## |\z)/ms ? $1 : '';
}

# The cells of the first table row of $text whose first cell is `name`.
sub doc_row
{
	my ($text, $name) = @_;
	my ($line) = grep { /^\|\s*`\Q$name\E`\s*\|/ } split /\n/, $text;
	return undef unless defined $line;
	my @cells = map { s/^\s+|\s+$//gr } split /\|/, $line;
	shift @cells;    # before the first |
	return \@cells;
}

sub unquote { return $_[0] =~ s/`//gr; }

my $node = PostgreSQL::Test::Cluster->new('docs');
$node->init;
# preloaded, so that the settings only the preloaded library defines exist
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'cagra'\ncagra.worker_backend = cpu\n");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION cagra');

# --- settings ------------------------------------------------------------
my $settings_doc = section($reference, 'Configuration parameters');
ok($settings_doc ne '', 'reference.md has a Configuration parameters section');
my @settings = split /\n/, $node->safe_psql('postgres', q{
	SELECT concat_ws('|', name, vartype, boot_val, coalesce(min_val, ''), coalesce(max_val, ''),
					 coalesce(array_to_string(enumvals, ','), ''))
	  FROM pg_settings WHERE name LIKE 'cagra.%' ORDER BY name});
cmp_ok(scalar @settings, '>=', 5, 'pg_settings lists the cagra settings');
cmp_ok(scalar @settings, '<=', 8, 'at most 8 settings for users (pg_settings shows no developer setting)');
foreach my $setting (@settings)
{
	my ($name, $type, $boot, $min, $max, $enumvals) = split /\|/, $setting, -1;
	my $row = doc_row($settings_doc, $name);
	ok(defined $row, "$name has a row in reference.md") or next;
	my (undef, $doc_type, $doc_default, $doc_range) = @$row;
	is(unquote($doc_default), $boot, "$name: documented default is the server's");
	if ($type eq 'integer' || $type eq 'real')
	{
		is($doc_range, "$min .. $max", "$name: documented range is the server's");
	}
	elsif ($type eq 'enum')
	{
		my @doc_values = sort($doc_range =~ /`([^`]+)`/g);
		is(join(',', @doc_values), join(',', sort split /,/, $enumvals),
			"$name: documented values are the server's");
	}
}

# The developer settings (hidden from pg_settings, as PostgreSQL's own):
# every setting guc.cpp defines that pg_settings does not list has a row in
# the developer section, with the server's default and range.
my $developer_doc = section($reference, 'Developer settings');
ok($developer_doc ne '', 'reference.md has a Developer settings section');
my %shown = map { (split /\|/)[0] => 1 } @settings;
my $guc_source = slurp_file("$src/src/protocol/guc.cpp");
my @defined = $guc_source =~ /DefineCustom\w+Variable\("(cagra\.\w+)"/g;
cmp_ok(scalar @defined, '<=', 13, 'guc.cpp defines at most 13 settings in all');
foreach my $name (grep { !$shown{$_} } @defined)
{
	my $row = doc_row($developer_doc, $name);
	ok(defined $row, "developer setting $name has a row in reference.md") or next;
	my (undef, $doc_type, $doc_default, $doc_range) = @$row;
	# cagra.worker_backend is set by this node's postgresql.conf
	is(unquote($doc_default), $node->safe_psql('postgres', "SHOW $name"),
		"$name: documented default is the server's")
	  unless $name eq 'cagra.worker_backend';
	if ($doc_type eq 'integer')
	{
		my ($ret, $out, $err) = $node->psql('postgres', "SET $name = -2147483648");
		my ($range) = $err =~ /\((-?\d+ \.\. -?\d+)\)/;
		is($doc_range, $range // $err, "$name: documented range is the server's");
	}
}

# The settings table of index.md, the tour of the SQL surface, gives defaults too.
my $index_page = slurp_file("$src/docs/index.md");
foreach my $setting (@settings)
{
	my ($name, $type, $boot) = split /\|/, $setting, -1;
	my $row = doc_row($index_page, $name);
	is(unquote($row->[1]), $boot, "$name: the default index.md gives is the server's")
	  if defined $row;
}

# --- reloptions ----------------------------------------------------------
my $reloptions_doc = section($reference, 'Storage parameters');
ok($reloptions_doc ne '', 'reference.md has a Storage parameters section');
my $handler = slurp_file("$src/src/am/handler.cpp");
my @reloptions;
while ($handler =~ /add_(\w+)_reloption\(\s*cagra_relopt_kind,\s*"(\w+)"/g)
{
	push @reloptions, [ $2, $1 ];
}
cmp_ok(scalar @reloptions, '>=', 4, 'handler.cpp defines the reloptions');

$node->safe_psql('postgres', q{
	CREATE TABLE t (v vector(2));
	INSERT INTO t VALUES ('[1,0]'), ('[0,1]');
	CREATE INDEX t_idx ON t USING cagra (v)});
my %info_columns = map { $_ => 1 } split /\n/, $node->safe_psql('postgres',
	q{SELECT a.attname FROM pg_proc p, unnest(p.proargnames, p.proargmodes) AS a(attname, mode)
	   WHERE p.proname = 'cagra_index_info' AND a.mode = 't'});

foreach my $opt (@reloptions)
{
	my ($name, $kind) = @$opt;
	my $row = doc_row($reloptions_doc, $name);
	ok(defined $row, "reloption $name has a row in reference.md") or next;
	my (undef, $doc_type, $doc_default, $doc_range) = @$row;
	if ($kind eq 'int')
	{
		my ($ret, $out, $err) = $node->psql('postgres',
			"ALTER INDEX t_idx SET ($name = -2147483648)");
		my ($min, $max) = $err =~ /between "(-?\d+)" and "(-?\d+)"/;
		is($doc_range, (defined $min ? "$min .. $max" : $err),
			"reloption $name: documented range is the server's");
		if ($info_columns{$name})
		{
			is($doc_default,
				$node->safe_psql('postgres', "SELECT $name FROM cagra_index_info('t_idx')"),
				"reloption $name: documented default is what an index gets without it");
		}
	}
	elsif ($kind eq 'enum')
	{
		my @doc_values = $doc_range =~ /`([^`]+)`/g;
		foreach my $value (@doc_values)
		{
			my ($ret, $out, $err) = $node->psql('postgres',
				"ALTER INDEX t_idx SET ($name = '$value')");
			is($ret, 0, "reloption $name takes documented value $value") or diag $err;
		}
		my ($ret, $out, $err) = $node->psql('postgres',
			"ALTER INDEX t_idx SET ($name = 'no_such_value')");
		isnt($ret, 0, "reloption $name refuses a value it does not document");
		# the default: the value the definition names, in its value table
		my ($values, $default) =
		  $handler =~ /add_enum_reloption\(\s*cagra_relopt_kind,\s*"\Q$name\E",\s*"[^"]*",\s*(\w+),\s*(\w+)/;
		my ($table) = $handler =~ /\Q$values\E\[\]\s*=\s*\{(.*?)\};/s;
		my ($default_name) = ($table // '') =~ /\{"(\w+)",\s*\Q$default\E\}/;
		is(unquote($doc_default), $default_name // '(not found)',
			"reloption $name: documented default is the definition's");
		my %in_table = map { $_ => 1 } ($table // '') =~ /\{"(\w+)",/g;
		is(join(',', sort @doc_values), join(',', sort keys %in_table),
			"reloption $name: documented values are the definition's");
	}
}

# --- functions and view columns --------------------------------------------
# Every cagra_* function of the extension is named in reference.md, and every
# column of its views and of its functions' result rows has a table row there.
my $extension_objects = q{
	FROM pg_depend d
	WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
	  AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'cagra')};
my @functions = split /\n/, $node->safe_psql('postgres', qq{
	SELECT DISTINCT p.proname FROM pg_proc p
	 WHERE p.proname LIKE 'cagra%' AND p.oid IN (SELECT d.objid $extension_objects
												  AND d.classid = 'pg_proc'::regclass)
	 ORDER BY 1});
cmp_ok(scalar @functions, '>=', 5, 'the extension has cagra_* functions');
like($reference, qr/`\Q$_\E[`(]/, "function $_ is in reference.md") foreach @functions;
my @columns = split /\n/, $node->safe_psql('postgres', qq{
	SELECT c.relname || '|' || a.attname FROM pg_class c
	  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	 WHERE c.relkind = 'v' AND c.oid IN (SELECT d.objid $extension_objects
										 AND d.classid = 'pg_class'::regclass)
	UNION ALL
	SELECT p.proname || '|' || o.name
	  FROM pg_proc p, unnest(p.proargnames, p.proargmodes) AS o(name, mode)
	 WHERE o.mode = 't' AND p.proname LIKE 'cagra%'
	   AND p.oid IN (SELECT d.objid $extension_objects AND d.classid = 'pg_proc'::regclass)
	ORDER BY 1});
foreach my $column (@columns)
{
	my ($object, $name) = split /\|/, $column;
	like($reference, qr/^\|\s*`\Q$name\E`\s*\|/m, "column $name of $object has a row in reference.md");
}

# --- SQLSTATEs -----------------------------------------------------------
my $errcodes = slurp_file($node->config_data('--includedir-server') . '/utils/errcodes.h');
my %sqlstate;
while ($errcodes =~ /#define (ERRCODE_\w+)\s+MAKE_SQLSTATE\('(.)',\s*'(.)',\s*'(.)',\s*'(.)',\s*'(.)'\)/g)
{
	$sqlstate{$1} = "$2$3$4$5$6";
}
my %raised;
foreach my $file (split /\n/, `find "$src/src" -name '*.cpp' -o -name '*.h'`)
{
	my $text = slurp_file($file);
	$raised{$_} = 1 foreach $text =~ /\b(ERRCODE_[A-Z_]+)\b/g;
}
cmp_ok(scalar keys %raised, '>=', 10, 'the code raises errors with SQLSTATEs');
foreach my $code (sort keys %raised)
{
	my $state = $sqlstate{$code};
	ok(defined $state, "$code is a PostgreSQL error code") or next;
	like($troubleshooting, qr/\b\Q$state\E\b/, "SQLSTATE $state ($code) appears in troubleshooting.md");
}

$node->stop;
done_testing();
