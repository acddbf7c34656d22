%% @doc mdss from Erlang: a gen_server that owns an `mdss port' process and forwards calls to it.
%%
%% The port is Python (`python -m mdss.port --store Url'), spoken to in the
%% External Term Format framed as `{packet, 4}': a request is
%% `{call, Id, Op, Args}' and the answer `{reply, Id, Result}' or
%% `{error, Id, {Kind, Message}}'. The port serves requests concurrently, so
%% this server never waits for one: it keeps every caller in a map by `Id'
%% and answers each when its reply arrives, or with a timeout error when
%% none came in time. If the port exits, every pending caller gets
%% `{error, {port_exited, Message}}' and the next call starts a new port.
%%
%% Sets and members are UTF-8 binaries; scores are integers, floats, or
%% the atoms `inf' and `-inf'. Entries are `{Member, Score, Rank}'.
%% Leaderboards (the `board_' functions) take a `Board': a name, or
%% `{Name, #{columns => ..., windows => ...}}'; rows come back as
%% `{Owner, Values, Updated}' and ranked rows as `{Rank, Owner, Values, Updated}',
%% with `Values' a map of field names (binaries) to values. Every
%% function returns `{ok, Value}' or `{error, {Kind, Message}}', where
%% `Kind' is the name of the mdss exception (`InvalidMemberError', ...), or
%% `timeout', `port_exited' or `port_failed' for what happens on this side.
%% See erlang/README.md for the options and the operations of call/3.
-module(mdss).
-behaviour(gen_server).

-export([start_link/1, start_link/2, stop/1]).
-export([add/4, add/5, add/6, set_data/4, add_many/3, add_many/4, incr/4, remove/3, remove_many/3,
         remove_range_by_score/4, remove_range_by_rank/4, pop_min/3, pop_max/3]).
-export([len/2, info/2, score/3, scores/3, rank/3, rank/4, rank_with_score/3, rank_with_score/4,
         rank_of_score/3, percentile/3, at_percentile/3, at_percentile/4,
         estimate_rank/3, estimate_rank/4, estimate_percentile/3, estimate_percentile/4, count/4,
         range/4, range_with_data/4, data/3, top/3, range_by_score/4, range_by_score/6, at/3, around/5, page/4, random_members/3]).
-export([load/3, load/4, union/3, union/4, intersection/3, intersection/4, gc/3, drop/2, check/2, merge/2]).
-export([topn_post/4, topn_post_many/3, topn_top/2, topn_threshold/2]).
-export([board_post/4, board_post/5, board_remove/3, board_remove/4, board_load/3, board_load/4,
         board_row/3, board_positions/3, board_around/6, board_rows/4, board_page/5, board_top/4,
         board_count/3, board_windows/2, board_percentile/4, board_at_percentile/4,
         board_check/2, board_gc/3, board_drop_window/3, board_drop/2]).
-export([call/3, call/4, os_pid/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2, terminate/2]).

-define(DEFAULT_TIMEOUT, 5000).
-define(DEFAULT_THREADS, 16).

-record(state, {
    url :: string(),
    python :: string(),
    threads :: pos_integer(),
    timeout :: timeout(),
    port = undefined :: port() | undefined,
    next_id = 1 :: pos_integer(),
    %% Id => {From, Timer}: the callers waiting for a reply
    pending = #{} :: #{pos_integer() => {gen_server:from(), reference()}}
}).

-type result(Value) :: {ok, Value} | {error, {atom(), binary()}}.
-type result() :: result(term()).
-type member() :: binary().
-type score() :: integer() | float() | inf | '-inf'.
%% A set: its name, or its name and the settings to create it with.
-type sorted_set() :: binary() | {binary(), #{order => asc | desc, chunk_size => pos_integer(),
                                              tiebreak => member | member_desc | first}}.
-type entry() :: {member(), score(), pos_integer()}.
-type pairs() :: [{member(), score()}] | #{member() => score()}.
-type ties() :: ordinal | competition | dense.
-type combine_options() :: #{weights => [number()], aggregate => sum | min | max, replace => boolean(),
                             order => asc | desc}.
-type write_op() :: set | incr | best | gt | lt.
%% A top-N set: its name (n 10, desc), or its name and settings.
-type top_n() :: binary() | {binary(), #{n => pos_integer(), order => asc | desc}}.
%% A leaderboard: its name (as stored), or its name and options (see erlang/README.md).
-type board() :: binary() | {binary(), #{atom() => term()}}.
%% A field, column or window name (binaries when they come back).
-type name() :: atom() | binary().
-type value() :: integer() | float() | inf | '-inf' | binary() | boolean().
-type row() :: {member(), #{binary() => value()}, number()}.
-type ranked_row() :: {pos_integer() | undefined, member(), #{binary() => value()}, number()}.
-export_type([result/0, result/1, member/0, score/0, sorted_set/0, entry/0, board/0]).

%% -- starting and stopping -----------------------------------------------------

%% @doc Start a client of the store at `StoreUrl' (`"sqlite:///board.db"', `"redis://host:6379/0"', ...).
-spec start_link(iodata()) -> {ok, pid()} | {error, term()}.
start_link(StoreUrl) ->
    start_link(StoreUrl, #{}).

%% @doc Start a client with options: `python' (the executable), `timeout' (ms per call,
%% default 5000) and `threads' (requests the port serves at once, default 16). An option
%% not given comes from the `mdss' application environment; `python' then from the
%% `MDSS_PYTHON' environment variable, then the `python3' on `PATH'. A `timeout' that is no
%% timeout, or `threads' not a positive integer: `{error, {bad_option, {Key, Value}}}'.
-spec start_link(iodata(), #{atom() => term()}) -> {ok, pid()} | {error, term()}.
start_link(StoreUrl, Options) when is_map(Options) ->
    gen_server:start_link(?MODULE, {unicode:characters_to_list(StoreUrl), Options}, []).

-spec stop(pid()) -> ok.
stop(Pid) ->
    gen_server:stop(Pid).

%% -- sets: writes ----------------------------------------------------------------

%% @doc Set `Member''s score; `{ok, true}' if it is new.
-spec add(pid(), sorted_set(), member(), score()) -> result(boolean()).
add(Pid, Set, Member, Score) -> call(Pid, add, [Set, Member, Score]).

%% @doc Apply `Op' to `Member''s score: `set', `incr' (add to it), `best' (keep the better), `gt' (raise
%% only), `lt' (lower only); `{ok, true}' if the member is new.
-spec add(pid(), sorted_set(), member(), score(), write_op()) -> result(boolean()).
add(Pid, Set, Member, Score, Op) -> call(Pid, add, [Set, Member, Score, Op]).

%% @doc add/5 with data: `Data' (a binary of up to 1 KB) is stored with the score, in the same commit, when
%% the op takes the score; `{ok, true}' if the member is new.
-spec add(pid(), sorted_set(), member(), score(), write_op(), binary()) -> result(boolean()).
add(Pid, Set, Member, Score, Op, Data) -> call(Pid, add, [Set, Member, Score, Op, #{data => Data}]).

%% @doc Set the data `Member' carries (`undefined' clears it), its score unchanged; `{ok, true}' if it is there.
-spec set_data(pid(), sorted_set(), member(), binary() | undefined) -> result(boolean()).
set_data(Pid, Set, Member, Data) -> call(Pid, set_data, [Set, Member, Data]).

%% @doc Set many members' scores in one commit; `{ok, HowManyNew}'.
-spec add_many(pid(), sorted_set(), pairs()) -> result(non_neg_integer()).
add_many(Pid, Set, Pairs) -> call(Pid, add_many, [Set, Pairs]).

%% @doc Apply `Op' (as in add/5) to many members in one commit; `{ok, HowManyNew}'.
-spec add_many(pid(), sorted_set(), pairs(), write_op()) -> result(non_neg_integer()).
add_many(Pid, Set, Pairs, Op) -> call(Pid, add_many, [Set, Pairs, Op]).

%% @doc Add `Delta' to `Member''s score (absent members start at 0); `{ok, NewScore}'.
-spec incr(pid(), sorted_set(), member(), score()) -> result(score()).
incr(Pid, Set, Member, Delta) -> call(Pid, incr, [Set, Member, Delta]).

%% @doc Remove `Member'; `{ok, true}' if it was there.
-spec remove(pid(), sorted_set(), member()) -> result(boolean()).
remove(Pid, Set, Member) -> call(Pid, remove, [Set, Member]).

%% @doc Remove many members in one commit; `{ok, HowManyWereThere}'.
-spec remove_many(pid(), sorted_set(), [member()]) -> result(non_neg_integer()).
remove_many(Pid, Set, Members) -> call(Pid, remove_many, [Set, Members]).

%% @doc Remove every member scored from `Lo' to `Hi' inclusive (numerically, whatever the set's order),
%% atomically (Redis' ZREMRANGEBYSCORE); `{ok, HowMany}'.
-spec remove_range_by_score(pid(), sorted_set(), score(), score()) -> result(non_neg_integer()).
remove_range_by_score(Pid, Set, Lo, Hi) -> call(Pid, remove_range_by_score, [Set, Lo, Hi]).

%% @doc Remove the entries ranked `First' to `Last' (1-based, inclusive), atomically; `{ok, HowMany}'.
-spec remove_range_by_rank(pid(), sorted_set(), pos_integer(), integer()) -> result(non_neg_integer()).
remove_range_by_rank(Pid, Set, First, Last) -> call(Pid, remove_range_by_rank, [Set, First, Last]).

%% @doc Remove and return up to `N' entries with the lowest scores, lowest first (Redis' ZPOPMIN). An
%% entry popped is returned to one caller only, however many pop at once.
-spec pop_min(pid(), sorted_set(), non_neg_integer()) -> result([entry()]).
pop_min(Pid, Set, N) -> call(Pid, pop_min, [Set, N]).

%% @doc Remove and return up to `N' entries with the highest scores, highest first (Redis' ZPOPMAX).
-spec pop_max(pid(), sorted_set(), non_neg_integer()) -> result([entry()]).
pop_max(Pid, Set, N) -> call(Pid, pop_max, [Set, N]).

%% -- sets: reads -----------------------------------------------------------------

%% @doc How many members the set has.
-spec len(pid(), sorted_set()) -> result(non_neg_integer()).
len(Pid, Set) -> call(Pid, len, [Set]).

%% @doc The set's settings and shape: `#{members, order, chunk_size, generation, ...}'.
-spec info(pid(), sorted_set()) -> result(#{atom() => term()}).
info(Pid, Set) -> call(Pid, info, [Set]).

%% @doc `Member''s score, or `{ok, undefined}'.
-spec score(pid(), sorted_set(), member()) -> result(score() | undefined).
score(Pid, Set, Member) -> call(Pid, score, [Set, Member]).

%% @doc The scores of `Members', `undefined' where absent.
-spec scores(pid(), sorted_set(), [member()]) -> result([score() | undefined]).
scores(Pid, Set, Members) -> call(Pid, scores, [Set, Members]).

%% @doc `Member''s 1-based rank (ties broken by member), or `{ok, undefined}'.
-spec rank(pid(), sorted_set(), member()) -> result(pos_integer() | undefined).
rank(Pid, Set, Member) -> call(Pid, rank, [Set, Member]).

%% @doc `Member''s rank with `Ties': `ordinal' (rank/3's), `competition' ("1224") or `dense' ("1223").
-spec rank(pid(), sorted_set(), member(), ties()) -> result(pos_integer() | undefined).
rank(Pid, Set, Member, Ties) -> call(Pid, rank, [Set, Member, Ties]).

%% @doc `{ok, {Rank, Score}}' from one snapshot (Redis' ZRANK ... WITHSCORE), or `{ok, undefined}'.
-spec rank_with_score(pid(), sorted_set(), member()) -> result({pos_integer(), score()} | undefined).
rank_with_score(Pid, Set, Member) -> call(Pid, rank_with_score, [Set, Member]).

%% @doc rank_with_score/3 with `Ties' as in rank/4.
-spec rank_with_score(pid(), sorted_set(), member(), ties()) -> result({pos_integer(), score()} | undefined).
rank_with_score(Pid, Set, Member, Ties) -> call(Pid, rank_with_score, [Set, Member, Ties]).

%% @doc The competition rank a member scoring `Score' would have.
-spec rank_of_score(pid(), sorted_set(), score()) -> result(pos_integer()).
rank_of_score(Pid, Set, Score) -> call(Pid, rank_of_score, [Set, Score]).

%% @doc The share of members with a strictly better score than `Member' (0.0 for the best, ties share
%% it), or `{ok, undefined}'.
-spec percentile(pid(), sorted_set(), member()) -> result(float() | undefined).
percentile(Pid, Set, Member) -> call(Pid, percentile, [Set, Member]).

%% @doc The entry at position `floor(P * len)' (`P' from 0 to 1, the last for 1), whose percentile is at
%% most `P'; `{ok, undefined}' for an empty set.
-spec at_percentile(pid(), sorted_set(), number()) -> result(entry() | undefined).
at_percentile(Pid, Set, P) -> call(Pid, at_percentile, [Set, P]).

%% @doc at_percentile/3 with the entry's rank following `Ties'.
-spec at_percentile(pid(), sorted_set(), number(), ties()) -> result(entry() | undefined).
at_percentile(Pid, Set, P, Ties) -> call(Pid, at_percentile, [Set, P, Ties]).

%% @doc An estimated rank of `Member' (ordinal) or of `{score, Score}' (competition), from cached
%% manifests: `{ok, {Rank, Low, High}}' with `Low =< exact rank =< High', or `{ok, undefined}' for an
%% absent member.
-spec estimate_rank(pid(), sorted_set(), member() | {score, score()}) ->
    result({pos_integer(), pos_integer(), pos_integer()} | undefined).
estimate_rank(Pid, Set, Of) -> call(Pid, estimate_rank, [Set, Of]).

%% @doc estimate_rank/3 with options: `ties' (`ordinal' or `competition'; a score's is competition) and
%% `max_error' (bounds wider than it are made exact; 0 for the exact rank).
-spec estimate_rank(pid(), sorted_set(), member() | {score, score()},
                    #{ties => ordinal | competition, max_error => non_neg_integer()}) ->
    result({pos_integer(), pos_integer(), pos_integer()} | undefined).
estimate_rank(Pid, Set, Of, Options) -> call(Pid, estimate_rank, [Set, Of, Options]).

%% @doc An estimated percentile of `Member' or of `{score, Score}': `{ok, {Percentile, Low, High}}',
%% or `{ok, undefined}' for an absent member.
-spec estimate_percentile(pid(), sorted_set(), member() | {score, score()}) ->
    result({float(), float(), float()} | undefined).
estimate_percentile(Pid, Set, Of) -> call(Pid, estimate_percentile, [Set, Of]).

%% @doc estimate_percentile/3 with `max_error' (a fraction: bounds wider than it are made exact).
-spec estimate_percentile(pid(), sorted_set(), member() | {score, score()}, #{max_error => number()}) ->
    result({float(), float(), float()} | undefined).
estimate_percentile(Pid, Set, Of, Options) -> call(Pid, estimate_percentile, [Set, Of, Options]).

%% @doc How many members score from `Best' to `Worst' inclusive (`Best' the higher bound of a desc set).
-spec count(pid(), sorted_set(), score(), score()) -> result(non_neg_integer()).
count(Pid, Set, Best, Worst) -> call(Pid, count, [Set, Best, Worst]).

%% @doc Up to `Limit' entries from position `Offset' (0 is rank 1).
-spec range(pid(), sorted_set(), non_neg_integer(), non_neg_integer()) -> result([entry()]).
range(Pid, Set, Offset, Limit) -> call(Pid, range, [Set, Offset, Limit]).

%% @doc range/4 with each member's data: `{Member, Score, Rank, Data}' (`Data' a binary or `undefined').
-spec range_with_data(pid(), sorted_set(), non_neg_integer(), non_neg_integer()) ->
    result([{member(), score(), pos_integer(), binary() | undefined}]).
range_with_data(Pid, Set, Offset, Limit) -> call(Pid, range_with_data, [Set, Offset, Limit]).

%% @doc The data `Member' carries (add/6, set_data/4), or `undefined'.
-spec data(pid(), sorted_set(), member()) -> result(binary() | undefined).
data(Pid, Set, Member) -> call(Pid, data, [Set, Member]).

%% @doc The best `N' entries of the set.
-spec top(pid(), sorted_set(), non_neg_integer()) -> result([entry()]).
top(Pid, Set, N) -> call(Pid, range, [Set, 0, N]).

%% @doc The entries scoring from `Best' to `Worst' inclusive, best first.
-spec range_by_score(pid(), sorted_set(), score(), score()) -> result([entry()]).
range_by_score(Pid, Set, Best, Worst) -> call(Pid, range_by_score, [Set, Best, Worst]).

%% @doc Up to `Limit' of the entries scoring from `Best' to `Worst', skipping the first `Offset'.
-spec range_by_score(pid(), sorted_set(), score(), score(), non_neg_integer(), non_neg_integer()) ->
    result([entry()]).
range_by_score(Pid, Set, Best, Worst, Offset, Limit) -> call(Pid, range_by_score, [Set, Best, Worst, Offset, Limit]).

%% @doc The entry at 1-based position `Rank', or `{ok, undefined}' past the end.
-spec at(pid(), sorted_set(), pos_integer()) -> result(entry() | undefined).
at(Pid, Set, Rank) -> call(Pid, at, [Set, Rank]).

%% @doc The entries around `Member', it included; `{ok, []}' if it is absent.
-spec around(pid(), sorted_set(), member(), non_neg_integer(), non_neg_integer()) -> result([entry()]).
around(Pid, Set, Member, Before, After) -> call(Pid, around, [Set, Member, Before, After]).

%% @doc A page of `Limit' entries: `{ok, {Entries, NextCursor or undefined}}'; `Cursor' `undefined' for
%% the first. Every page of a walk comes from the snapshot of its first.
-spec page(pid(), sorted_set(), non_neg_integer(), binary() | undefined) ->
    result({[entry()], binary() | undefined}).
page(Pid, Set, Limit, Cursor) -> call(Pid, page, [Set, Limit, Cursor]).

%% @doc Up to `N' distinct entries drawn uniformly from one snapshot (Redis' ZRANDMEMBER).
-spec random_members(pid(), sorted_set(), non_neg_integer()) -> result([entry()]).
random_members(Pid, Set, N) -> call(Pid, random_members, [Set, N]).

%% -- sets: whole-set operations ----------------------------------------------------

%% @doc Build the whole set from `Pairs' bottom-up in one commit (an empty set only); `{ok, HowMany}'.
%% The pairs travel in one request of at most 64 MiB: see erlang/README.md.
-spec load(pid(), sorted_set(), pairs()) -> result(non_neg_integer()).
load(Pid, Set, Pairs) -> call(Pid, load, [Set, Pairs]).

%% @doc load/3 with options: `replace => true' replaces a set that has entries.
-spec load(pid(), sorted_set(), pairs(), #{replace => boolean()}) -> result(non_neg_integer()).
load(Pid, Set, Pairs, Options) -> call(Pid, load, [Set, Pairs, Options]).

%% @doc Redis' ZUNIONSTORE: `Dest' becomes one new set of every member of `Sources', its scores summed
%% (`{ok, HowMany}'), written in one commit; a `Dest' with entries is refused unless `replace => true'.
-spec union(pid(), binary(), [sorted_set()]) -> result(non_neg_integer()).
union(Pid, Dest, Sources) -> call(Pid, union, [Dest, Sources]).

%% @doc union/3 with options: `weights' (one number per source, multiplying its scores), `aggregate'
%% (`sum', `min' or `max'), `replace', `order' (the result's, when the sources' orders differ).
-spec union(pid(), binary(), [sorted_set()], combine_options()) -> result(non_neg_integer()).
union(Pid, Dest, Sources, Options) -> call(Pid, union, [Dest, Sources, Options]).

%% @doc Redis' ZINTERSTORE: `Dest' becomes the members every source holds, as union/3 writes it.
-spec intersection(pid(), binary(), [sorted_set()]) -> result(non_neg_integer()).
intersection(Pid, Dest, Sources) -> call(Pid, intersection, [Dest, Sources]).

%% @doc intersection/3 with the options of union/4.
-spec intersection(pid(), binary(), [sorted_set()], combine_options()) -> result(non_neg_integer()).
intersection(Pid, Dest, Sources, Options) -> call(Pid, intersection, [Dest, Sources, Options]).

%% @doc Delete the set's stored nodes no reader can need any more; `{ok, HowMany}'. Options: `wait'
%% (`false' skips the 30 s grace period, longer than the default timeout, for readers of older heads),
%% `sweep' (`true' also looks for nodes crashed writers left), `min_age' (seconds such a node must have).
-spec gc(pid(), sorted_set(), #{wait => boolean(), sweep => boolean(), min_age => number()}) ->
    result(non_neg_integer()).
gc(Pid, Set, Options) -> call(Pid, gc, [Set, Options]).

%% @doc Remove the whole set; `{ok, undefined}'. A later call naming it starts a new, empty one.
-spec drop(pid(), sorted_set()) -> result(undefined).
drop(Pid, Set) -> call(Pid, drop, [Set]).

%% @doc Verify every invariant of the stored set (reads all of it); `{ok, []}' when sound.
-spec check(pid(), sorted_set()) -> result([binary()]).
check(Pid, Set) -> call(Pid, check, [Set]).

%% @doc Fold the set's update log into its trees now; `{ok, false}' if there was nothing to merge.
-spec merge(pid(), sorted_set()) -> result(boolean()).
merge(Pid, Set) -> call(Pid, merge, [Set]).

%% -- top-N sets ------------------------------------------------------------------

%% @doc Post `Member''s score to the top-N set; `{ok, true}' if the top changed.
-spec topn_post(pid(), top_n(), member(), score()) -> result(boolean()).
topn_post(Pid, TopN, Member, Score) -> call(Pid, topn_post, [TopN, Member, Score]).

%% @doc Post many scores at once; `{ok, true}' if the top changed.
-spec topn_post_many(pid(), top_n(), pairs()) -> result(boolean()).
topn_post_many(Pid, TopN, Pairs) -> call(Pid, topn_post_many, [TopN, Pairs]).

%% @doc The top's entries, best first.
-spec topn_top(pid(), top_n()) -> result([entry()]).
topn_top(Pid, TopN) -> call(Pid, topn_top, [TopN]).

%% @doc The score to beat to enter the top, or `{ok, undefined}' while it is not full.
-spec topn_threshold(pid(), top_n()) -> result(score() | undefined).
topn_threshold(Pid, TopN) -> call(Pid, topn_threshold, [TopN]).

%% -- leaderboards (options of the views through call/3: see erlang/README.md) -----

%% @doc Post `Values' (a map) for `Owner' to every window of the board; `{ok, #{Window => Changed}}'.
-spec board_post(pid(), board(), member(), #{name() => value()}) -> result(#{binary() => boolean()}).
board_post(Pid, Board, Owner, Values) -> call(Pid, board_post, [Board, Owner, Values]).

%% @doc Post with options: `post_id' (a retried post is a no-op), `only' (`new' | `existing'), `ops'.
-spec board_post(pid(), board(), member(), #{name() => value()}, #{atom() => term()}) ->
    result(#{binary() => boolean()}).
board_post(Pid, Board, Owner, Values, Options) -> call(Pid, board_post, [Board, Owner, Values, Options]).

%% @doc Remove `Owner''s row from every window of the board (a cheater, a deleted account):
%% `{ok, #{Window => WasThere}}'. Ranks, counts and pages agree at once.
-spec board_remove(pid(), board(), member()) -> result(#{binary() => boolean()}).
board_remove(Pid, Board, Owner) -> call(Pid, board_remove, [Board, Owner]).

%% @doc Remove `Owner''s row from one window: `#{window => W}', a kind (its current instance) or an instance.
-spec board_remove(pid(), board(), member(), #{window => name()}) -> result(#{binary() => boolean()}).
board_remove(Pid, Board, Owner, Options) -> call(Pid, board_remove, [Board, Owner, Options]).

%% @doc Load `Rows' (`[{Owner, Values}]' or `#{Owner => Values}') into the current instance of every
%% window kind, each empty, each built in one commit; `{ok, RowsLoaded}'. One request: see load/3.
-spec board_load(pid(), board(), [{member(), #{name() => value()}}] | #{member() => #{name() => value()}}) ->
    result(non_neg_integer()).
board_load(Pid, Board, Rows) -> call(Pid, board_load, [Board, Rows]).

%% @doc board_load/3 with options: `window' (load that window only), `replace => true' (replace its rows).
-spec board_load(pid(), board(), [{member(), #{name() => value()}}] | #{member() => #{name() => value()}},
                 #{window => name(), replace => boolean()}) -> result(non_neg_integer()).
board_load(Pid, Board, Rows, Options) -> call(Pid, board_load, [Board, Rows, Options]).

%% @doc `Owner''s row in the default window: `{ok, {Owner, Values, Updated}}' or `{ok, undefined}'.
-spec board_row(pid(), board(), member()) -> result(row() | undefined).
board_row(Pid, Board, Owner) -> call(Pid, board_row, [Board, Owner]).

%% @doc `Owner''s rank in every column its row has: `{ok, #{Column => Rank}}'.
-spec board_positions(pid(), board(), member()) -> result(#{binary() => pos_integer()}).
board_positions(Pid, Board, Owner) -> call(Pid, board_positions, [Board, Owner]).

%% @doc The ranked rows around `Owner''s in `Column': up to `Before' better, up to `After' worse.
-spec board_around(pid(), board(), member(), name(), non_neg_integer(), non_neg_integer()) ->
    result([ranked_row()]).
board_around(Pid, Board, Owner, Column, Before, After) ->
    call(Pid, board_around, [Board, Owner, Column, Before, After]).

%% @doc The ranked rows of `Owners' (friends) in `Column', best first.
-spec board_rows(pid(), board(), [member()], name()) -> result([ranked_row()]).
board_rows(Pid, Board, Owners, Column) -> call(Pid, board_rows, [Board, Owners, Column]).

%% @doc A page of `Column': `{ok, {RankedRows, NextCursor or undefined}}'; `Cursor' `undefined' for the first.
-spec board_page(pid(), board(), name(), non_neg_integer(), binary() | undefined) ->
    result({[ranked_row()], binary() | undefined}).
board_page(Pid, Board, Column, Limit, Cursor) -> call(Pid, board_page, [Board, Column, Limit, Cursor]).

%% @doc The best `N' ranked rows of `Column'.
-spec board_top(pid(), board(), name(), non_neg_integer()) -> result([ranked_row()]).
board_top(Pid, Board, Column, N) -> call(Pid, board_top, [Board, Column, N]).

%% @doc How many rows `Column' ranks (rows that have all its fields).
-spec board_count(pid(), board(), name()) -> result(non_neg_integer()).
board_count(Pid, Board, Column) -> call(Pid, board_count, [Board, Column]).

%% @doc The board's window instances, oldest first (`<<"all">>', `<<"week:2026-W47">>', ...).
-spec board_windows(pid(), board()) -> result([binary()]).
board_windows(Pid, Board) -> call(Pid, board_windows, [Board]).

%% @doc The share of `Column''s rows ranked strictly better than `Owner''s (0.0 for the best), or `undefined'.
-spec board_percentile(pid(), board(), member(), name()) -> result(float() | undefined).
board_percentile(Pid, Board, Owner, Column) -> call(Pid, board_percentile, [Board, Owner, Column]).

%% @doc The ranked row at position `floor(P * rows)' of `Column' (`P' from 0 to 1), or `undefined'.
-spec board_at_percentile(pid(), board(), name(), number()) -> result(ranked_row() | undefined).
board_at_percentile(Pid, Board, Column, P) -> call(Pid, board_at_percentile, [Board, Column, P]).

%% @doc Verify the default window's set and rows; `{ok, []}' when sound.
-spec board_check(pid(), board()) -> result([binary()]).
board_check(Pid, Board) -> call(Pid, board_check, [Board]).

%% @doc Delete what no reader can need any more, in every window (or `window'), the registry and the
%% record of post ids; `{ok, KeysDeleted}'. Options as gc/3's (`wait', `sweep') and `window'.
-spec board_gc(pid(), board(), #{window => name(), wait => boolean(), sweep => boolean()}) ->
    result(non_neg_integer()).
board_gc(Pid, Board, Options) -> call(Pid, board_gc, [Board, Options]).

%% @doc Remove one window instance (a kind's current one, or `<<"week:2026-W47">>', ...) and its rows.
-spec board_drop_window(pid(), board(), name()) -> result(undefined).
board_drop_window(Pid, Board, Window) -> call(Pid, board_drop_window, [Board, Window]).

%% @doc Remove the whole board: every window, the record of post ids, the settings.
-spec board_drop(pid(), board()) -> result(undefined).
board_drop(Pid, Board) -> call(Pid, board_drop, [Board]).

%% @doc Any operation of the port (see erlang/README.md), with the client's timeout.
-spec call(pid(), atom(), list()) -> result().
call(Pid, Op, Args) ->
    gen_server:call(Pid, {call, Op, Args, default}, infinity).

%% @doc Any operation of the port, answered within `Timeout' ms or `{error, {timeout, _}}'.
%% A `Timeout' that is not one (`1.5', `-1') fails in the caller (`function_clause'), not in the client all callers share.
-spec call(pid(), atom(), list(), timeout()) -> result().
call(Pid, Op, Args, Timeout) when Timeout =:= infinity; is_integer(Timeout), Timeout >= 0 ->
    gen_server:call(Pid, {call, Op, Args, Timeout}, infinity).

%% @doc The operating-system pid of the port process (`{error, {port_exited, _}}' if none runs).
-spec os_pid(pid()) -> result().
os_pid(Pid) ->
    gen_server:call(Pid, os_pid, infinity).

%% -- gen_server ------------------------------------------------------------------

init({Url, Options}) ->
    process_flag(trap_exit, true),
    case python(Options) of
        false ->
            {stop, {no_python, "no python3 on PATH: set the python option, the mdss application's python, "
                               "or MDSS_PYTHON"}};
        Python ->
            Threads = option(threads, Options, ?DEFAULT_THREADS),
            Timeout = option(timeout, Options, ?DEFAULT_TIMEOUT),
            if
                not is_integer(Threads); Threads < 1 ->
                    {stop, {bad_option, {threads, Threads}}};
                Timeout =/= infinity andalso (not is_integer(Timeout) orelse Timeout < 0) ->
                    {stop, {bad_option, {timeout, Timeout}}};
                true ->
                    case open(#state{url = Url, python = Python, threads = Threads, timeout = Timeout}) of
                        {ok, Started} -> {ok, Started};
                        {error, Why} -> {stop, {port_failed, Why}}
                    end
            end
    end.

handle_call({call, Op, Args, Timeout0}, From, State0) ->
    Timeout = case Timeout0 of default -> State0#state.timeout; _ -> Timeout0 end,
    case open(State0) of
        {error, Why} ->
            {reply, {error, {port_failed, Why}}, State0};
        {ok, State = #state{port = Port, next_id = Id, pending = Pending}} ->
            try port_command(Port, term_to_binary({call, Id, Op, Args})) of
                true ->
                    Timer = timer(Timeout, Id),
                    {noreply, State#state{next_id = Id + 1, pending = Pending#{Id => {From, Timer}}}}
            catch
                error:badarg -> % the port died just now; its exit message follows
                    {reply, {error, {port_exited, <<"the mdss port exited before the request was sent">>}}, State}
            end
    end;
handle_call(os_pid, _From, State = #state{port = undefined}) ->
    {reply, {error, {port_exited, <<"no mdss port is running">>}}, State};
handle_call(os_pid, _From, State = #state{port = Port}) ->
    case erlang:port_info(Port, os_pid) of
        {os_pid, OsPid} -> {reply, {ok, OsPid}, State};
        undefined -> {reply, {error, {port_exited, <<"no mdss port is running">>}}, State}
    end.

handle_cast(_Request, State) ->
    {noreply, State}.

handle_info({Port, {data, Data}}, State = #state{port = Port}) ->
    case catch binary_to_term(Data) of
        {reply, Id, Result} -> {noreply, answer(Id, {ok, Result}, State)};
        {error, Id, Reason = {_Kind, _Message}} -> {noreply, answer(Id, {error, Reason}, State)};
        Other ->
            logger:warning("mdss: unexpected data from the port: ~tP", [Other, 20]),
            {noreply, State}
    end;
handle_info({timeout, Id}, State) ->
    Message = <<"no reply from the mdss port in time (the call may still take effect)">>,
    {noreply, answer(Id, {error, {timeout, Message}}, State)};
handle_info({Port, {exit_status, Status}}, State = #state{port = Port}) ->
    {noreply, port_gone(io_lib:format("the mdss port exited with status ~b", [Status]), State)};
handle_info({'EXIT', Port, Reason}, State = #state{port = Port}) ->
    {noreply, port_gone(io_lib:format("the mdss port closed: ~tp", [Reason]), State)};
handle_info(_Stale, State) -> % a late reply, an old port's exit, a timer already answered
    {noreply, State}.

terminate(_Reason, #state{port = Port}) ->
    Port =:= undefined orelse catch port_close(Port),
    ok.

%% -- internals -------------------------------------------------------------------

%% Start the port unless it runs.
open(State = #state{port = Port}) when Port =/= undefined ->
    {ok, State};
open(State = #state{url = Url, python = Python, threads = Threads}) ->
    Args = ["-m", "mdss.port", "--store", Url, "--threads", integer_to_list(Threads)],
    try open_port({spawn_executable, Python}, [{args, Args}, {packet, 4}, binary, exit_status, use_stdio, hide]) of
        Port -> {ok, State#state{port = Port}}
    catch
        error:Why -> {error, unicode:characters_to_binary(io_lib:format("cannot run ~ts: ~tp", [Python, Why]))}
    end.

%% Answer the caller waiting for `Id' (if it still waits) and forget it.
answer(Id, Reply, State = #state{pending = Pending}) ->
    case maps:take(Id, Pending) of
        {{From, Timer}, Rest} ->
            cancel(Timer),
            gen_server:reply(From, Reply),
            State#state{pending = Rest};
        error ->
            State
    end.

%% The port exited: fail every pending call; the next call starts a new port.
port_gone(Why, State = #state{pending = Pending}) ->
    Reply = {error, {port_exited, unicode:characters_to_binary(Why)}},
    maps:foreach(fun(_Id, {From, Timer}) -> cancel(Timer), gen_server:reply(From, Reply) end, Pending),
    State#state{port = undefined, pending = #{}}.

timer(infinity, _Id) -> undefined;
timer(Timeout, Id) -> erlang:send_after(Timeout, self(), {timeout, Id}).

cancel(undefined) -> ok;
cancel(Timer) -> erlang:cancel_timer(Timer), ok.

%% An option from the start options, else the application environment, else the default.
option(Key, Options, Default) ->
    case maps:find(Key, Options) of
        {ok, Value} -> Value;
        error -> application:get_env(mdss, Key, Default)
    end.

%% The Python executable: the option, the application's `python', `MDSS_PYTHON', or `python3' on PATH.
python(Options) ->
    case option(python, Options, os:getenv("MDSS_PYTHON", "")) of
        "" -> os:find_executable("python3");
        Path -> Path
    end.
