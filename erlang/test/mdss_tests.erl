%% EUnit suite of the mdss client against a real port and store.
%%
%% MDSS_TEST_STORE names the store (tests/test_erlang.py passes a fresh SQLite file or Redis
%% namespace; without it, a new SQLite file under /tmp); MDSS_PYTHON the Python with mdss.
-module(mdss_tests).
-include_lib("eunit/include/eunit.hrl").

client_test_() ->
    {setup, fun start/0, fun mdss:stop/1,
     {with, [fun reads_and_writes/1,
             fun ties_and_scores/1,
             fun every_other_operation/1,
             fun pages_through_a_multi_level_set/1,
             fun top_n/1,
             fun leaderboard/1,
             fun errors_name_the_mdss_exception/1,
             fun concurrent_callers/1,
             fun timeout_then_late_reply_is_dropped/1,
             fun restarts_a_port_that_exits/1]}}.

start() ->
    {ok, Pid} = mdss:start_link(store(), #{timeout => 20000}),
    Pid.

store() ->
    case os:getenv("MDSS_TEST_STORE") of
        false -> "sqlite:////tmp/mdss-eunit-" ++ integer_to_list(erlang:unique_integer([positive])) ++ ".db";
        Url -> Url
    end.

reads_and_writes(Pid) ->
    S = <<"season-1">>,
    ?assertEqual({ok, true}, mdss:add(Pid, S, <<"alice">>, 310)),
    ?assertEqual({ok, true}, mdss:add(Pid, S, <<"bob">>, 120)),
    ?assertEqual({ok, true}, mdss:add(Pid, S, <<"carol">>, 310)),
    ?assertEqual({ok, false}, mdss:add(Pid, S, <<"bob">>, 125)),
    ?assertEqual({ok, 150}, mdss:incr(Pid, S, <<"dave">>, 150)),
    ?assertEqual({ok, 310}, mdss:score(Pid, S, <<"alice">>)),
    ?assertEqual({ok, undefined}, mdss:score(Pid, S, <<"nobody">>)),
    ?assertEqual({ok, 2}, mdss:rank(Pid, S, <<"carol">>)),
    ?assertEqual({ok, undefined}, mdss:rank(Pid, S, <<"nobody">>)),
    ?assertEqual({ok, [{<<"alice">>, 310, 1}, {<<"carol">>, 310, 2}]}, mdss:top(Pid, S, 2)),
    ?assertEqual({ok, [{<<"dave">>, 150, 3}, {<<"bob">>, 125, 4}]}, mdss:range(Pid, S, 2, 10)),
    ?assertEqual({ok, [{<<"carol">>, 310, 2}, {<<"dave">>, 150, 3}, {<<"bob">>, 125, 4}]},
                 mdss:around(Pid, S, <<"dave">>, 1, 1)),
    ?assertEqual({ok, []}, mdss:around(Pid, S, <<"nobody">>, 1, 1)),
    ?assertEqual({ok, true}, mdss:remove(Pid, S, <<"bob">>)),
    ?assertEqual({ok, false}, mdss:remove(Pid, S, <<"bob">>)),
    ?assertEqual({ok, 3}, mdss:call(Pid, len, [S])).

ties_and_scores(Pid) ->
    S = <<"ties">>,
    Max = 1 bsl 63 - 1,
    {ok, 5} = mdss:call(Pid, add_many, [S, [{<<"a">>, 5}, {<<"b">>, 7}, {<<"c">>, 5}, {<<"ü✓"/utf8>>, 2.5},
                                            {<<"big">>, Max}]]),
    ?assertEqual({ok, 4}, mdss:rank(Pid, S, <<"c">>)),
    ?assertEqual({ok, 3}, mdss:call(Pid, rank, [S, <<"c">>, competition])),
    ?assertEqual({ok, 4}, mdss:call(Pid, rank, [S, <<"ü✓"/utf8>>, dense])),
    ?assertEqual({ok, Max}, mdss:score(Pid, S, <<"big">>)),
    ?assertEqual({ok, 2.5}, mdss:score(Pid, S, <<"ü✓"/utf8>>)),
    ?assertEqual({ok, 1}, mdss:call(Pid, rank_of_score, [S, Max])),
    {ok, _} = mdss:add(Pid, S, <<"top">>, inf),
    {ok, _} = mdss:add(Pid, S, <<"bottom">>, '-inf'),
    ?assertEqual({ok, {<<"top">>, inf, 1}}, mdss:call(Pid, at, [S, 1])),
    ?assertEqual({ok, {<<"bottom">>, '-inf', 7}}, mdss:call(Pid, at, [S, 7])),
    ?assertEqual({ok, undefined}, mdss:call(Pid, at, [S, 8])),
    ?assertEqual({ok, false}, mdss:call(Pid, add, [S, <<"a">>, 8, best])),
    ?assertEqual({ok, 8}, mdss:score(Pid, S, <<"a">>)),
    ?assertEqual({ok, false}, mdss:call(Pid, add, [S, <<"a">>, 1, best])),
    ?assertEqual({ok, 8}, mdss:score(Pid, S, <<"a">>)).

every_other_operation(Pid) ->
    S = <<"ops">>,
    {ok, 6} = mdss:call(Pid, add_many, [S, #{<<"m1">> => 1, <<"m2">> => 2, <<"m3">> => 3,
                                            <<"m4">> => 4, <<"m5">> => 5, <<"m6">> => 6}]),
    ?assertEqual({ok, [3, undefined, 6]}, mdss:call(Pid, scores, [S, [<<"m3">>, <<"zz">>, <<"m6">>]])),
    ?assertEqual({ok, 3}, mdss:call(Pid, count, [S, 5, 3])),
    ?assertEqual({ok, [{<<"m4">>, 4, 3}, {<<"m3">>, 3, 4}]}, mdss:call(Pid, range_by_score, [S, 5, 3, 1, 5])),
    ?assertEqual({ok, [{<<"m5">>, 5, 2}, {<<"m4">>, 4, 3}, {<<"m3">>, 3, 4}]},
                 mdss:call(Pid, range_by_score, [S, 5, 3])),
    ?assertEqual({ok, 1}, mdss:call(Pid, add_many, [S, [{<<"m1">>, 10}, {<<"m9">>, 1}], incr])),
    ?assertEqual({ok, 11}, mdss:score(Pid, S, <<"m1">>)),
    ?assertEqual({ok, 2}, mdss:call(Pid, remove_many, [S, [<<"m9">>, <<"m2">>, <<"zz">>]])),
    ?assertEqual({ok, []}, mdss:call(Pid, check, [S])),
    {ok, #{log_entries := Logged}} = mdss:call(Pid, info, [S]),
    ?assert(Logged > 0),  % small writes wait in the update log
    ?assertEqual({ok, true}, mdss:call(Pid, merge, [S])),
    {ok, Info} = mdss:call(Pid, info, [S]),
    ?assertMatch(#{members := 5, order := desc, chunk_size := 1000, score_tree_height := 1, log_entries := 0}, Info).

pages_through_a_multi_level_set(Pid) ->
    S = {<<"paged">>, #{order => asc, chunk_size => 4}},
    Pairs = [{iolist_to_binary(io_lib:format("p~3..0b", [I])), (I * 37) rem 101} || I <- lists:seq(1, 150)],
    {ok, 150} = mdss:call(Pid, add_many, [S, Pairs]),
    {ok, All} = mdss:call(Pid, range, [S, 0, 200]),
    ?assertEqual(lists:sort([{Score, M} || {M, Score} <- Pairs]), [{Score, M} || {M, Score, _} <- All]),
    ?assertEqual(All, pages(Pid, S, undefined, [])),
    {ok, #{score_tree_height := Height}} = mdss:call(Pid, info, [<<"paged">>]),
    ?assert(Height >= 3),
    ?assertEqual({ok, []}, mdss:call(Pid, check, [<<"paged">>])),
    ?assertMatch({error, {'SettingsMismatchError', _}}, mdss:call(Pid, len, [{<<"paged">>, #{order => desc}}])).

pages(Pid, S, Cursor, Acc) ->
    {ok, {Entries, Next}} = mdss:call(Pid, page, [S, 7, Cursor]),
    case Next of
        undefined -> Acc ++ Entries;
        _ -> pages(Pid, S, Next, Acc ++ Entries)
    end.

top_n(Pid) ->
    T = {<<"podium">>, #{n => 3}},
    ?assertEqual({ok, true}, mdss:call(Pid, topn_post_many, [T, [{<<"ann">>, 7}, {<<"bob">>, 9}, {<<"cid">>, 8}]])),
    ?assertEqual({ok, false}, mdss:call(Pid, topn_post, [T, <<"dee">>, 2])),
    ?assertEqual({ok, true}, mdss:call(Pid, topn_post, [T, <<"dee">>, 10])),
    ?assertEqual({ok, [{<<"dee">>, 10, 1}, {<<"bob">>, 9, 2}, {<<"cid">>, 8, 3}]}, mdss:call(Pid, topn_top, [T])),
    ?assertEqual({ok, 8}, mdss:call(Pid, topn_threshold, [T])),
    ?assertEqual({ok, undefined}, mdss:call(Pid, topn_threshold, [<<"empty podium">>])).

leaderboard(Pid) ->
    B = {<<"mission-7">>, #{columns => #{xp => desc, race => [{laps, desc}, {time_ms, asc}]},
                            accumulate => [shots], keep_best => #{time_ms => min}, windows => [all, week]}},
    Ann = #{xp => 600, shots => 10, laps => 3, time_ms => 61000, name => <<"Ann">>, pro => true},
    {ok, Posted} = mdss:board_post(Pid, B, <<"ann">>, Ann, #{post_id => <<"job-1">>}),
    ?assertEqual([true, true], maps:values(Posted)),
    {ok, Again} = mdss:board_post(Pid, B, <<"ann">>, Ann, #{post_id => <<"job-1">>}),  % a retry
    ?assertEqual([false, false], maps:values(Again)),
    {ok, _} = mdss:board_post(Pid, B, <<"bob">>, #{xp => 900, shots => 4, laps => 3, time_ms => 59000}),
    {ok, _} = mdss:board_post(Pid, B, <<"cid">>, #{xp => 600, laps => 2, time_ms => inf}),
    ?assertMatch({ok, {<<"ann">>, #{<<"xp">> := 600, <<"shots">> := 10, <<"name">> := <<"Ann">>, <<"pro">> := true},
                       _}}, mdss:board_row(Pid, B, <<"ann">>)),
    ?assertEqual({ok, undefined}, mdss:board_row(Pid, B, <<"nobody">>)),
    ?assertEqual({ok, #{<<"xp">> => 2, <<"race">> => 2}}, mdss:board_positions(Pid, B, <<"ann">>)),
    ?assertEqual({ok, #{<<"xp">> => 2, <<"race">> => 3}},
                 mdss:call(Pid, board_positions, [B, <<"cid">>, #{ties => competition}])),
    ?assertEqual([{1, <<"bob">>}, {2, <<"ann">>}, {3, <<"cid">>}], ranks(mdss:board_top(Pid, B, xp, 10))),
    ?assertEqual([{1, <<"bob">>}, {2, <<"ann">>}, {2, <<"cid">>}],
                 ranks(mdss:call(Pid, board_top, [B, xp, 10, #{ties => dense}]))),
    ?assertEqual([{1, <<"bob">>}, {2, <<"ann">>}], ranks(mdss:board_around(Pid, B, <<"ann">>, <<"race">>, 5, 0))),
    ?assertEqual([{1, <<"bob">>}, {3, <<"cid">>}], ranks(mdss:board_rows(Pid, B, [<<"cid">>, <<"bob">>, <<"zed">>], race))),
    {ok, {First, Cursor}} = mdss:board_page(Pid, B, xp, 2, undefined),
    {ok, {Second, undefined}} = mdss:board_page(Pid, B, xp, 2, Cursor),
    ?assertEqual([<<"bob">>, <<"ann">>, <<"cid">>], [O || {_, O, _, _} <- First ++ Second]),
    {ok, [<<"all">>, <<"week:", _/binary>>]} = mdss:board_windows(Pid, B),
    {ok, Share} = mdss:board_percentile(Pid, B, <<"ann">>, xp),
    ?assert(abs(Share - 1 / 3) < 1.0e-9),
    ?assertMatch({ok, {1, <<"bob">>, _, _}}, mdss:call(Pid, board_at_percentile, [B, xp, 0.0])),
    ?assertEqual({ok, 3}, mdss:call(Pid, board_count, [<<"mission-7">>, xp])),  % a stored board, by name
    ?assertEqual({ok, []}, mdss:call(Pid, board_check, [B, #{window => week}])),
    {ok, Deleted} = mdss:call(Pid, board_gc, [B, #{sweep => true, wait => false}]),
    ?assert(is_integer(Deleted)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:board_post(Pid, B, <<"ann">>, #{xp => [1]})),
    ?assertMatch({error, {'InvalidScoreError', _}}, mdss:board_post(Pid, B, <<"ann">>, #{xp => <<"lots">>})),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:board_top(Pid, B, nope, 10)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:board_row(Pid, <<"no such board">>, <<"ann">>)).

ranks({ok, Rows}) -> [{Rank, Owner} || {Rank, Owner, _, _} <- Rows].

errors_name_the_mdss_exception(Pid) ->
    S = <<"errors">>,
    ?assertMatch({error, {'InvalidMemberError', _}}, mdss:add(Pid, S, alice, 1)),
    ?assertMatch({error, {'InvalidMemberError', _}}, mdss:add(Pid, S, "alice", 1)),
    ?assertMatch({error, {'InvalidMemberError', _}}, mdss:add(Pid, S, <<255, 0>>, 1)),
    ?assertMatch({error, {'InvalidMemberError', _}}, mdss:add(Pid, S, <<>>, 1)),
    ?assertMatch({error, {'InvalidScoreError', _}}, mdss:add(Pid, S, <<"a">>, <<"1">>)),
    ?assertMatch({error, {'InvalidScoreError', _}}, mdss:add(Pid, S, <<"a">>, 1 bsl 63)),
    {ok, _} = mdss:add(Pid, S, <<"a">>, 1 bsl 63 - 1),
    ?assertMatch({error, {'InvalidScoreError', _}}, mdss:incr(Pid, S, <<"a">>, 1)),
    ?assertMatch({error, {'InvalidArgumentError', <<"unknown operation", _/binary>>}}, mdss:call(Pid, nope, [S])),
    ?assertMatch({error, {'InvalidArgumentError', <<"rank takes", _/binary>>}}, mdss:call(Pid, rank, [S])),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, rank, [S, <<"a">>, '1223'])),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, rank, not_a_list)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:range(Pid, S, -1, 10)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:range(Pid, S, 0, 1.5)),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, len, [<<>>])),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, page, [S, 1, <<"not a cursor">>])),
    ?assertMatch({error, {'InvalidArgumentError', _}}, mdss:call(Pid, len, [{S, #{colour => red}}])),
    ?assertEqual({ok, 1}, mdss:call(Pid, len, [S])).

concurrent_callers(Pid) ->
    S = <<"counter">>,
    Self = self(),
    Workers = [spawn_link(fun() ->
                   Results = [mdss:incr(Pid, S, <<"hits">>, 1) || _ <- lists:seq(1, 25)],
                   Ranks = [mdss:rank(Pid, S, <<"hits">>) || _ <- lists:seq(1, 5)],
                   Self ! {done, self(), Results ++ Ranks}
               end) || _ <- lists:seq(1, 8)],
    Replies = lists:append([receive {done, W, R} -> R end || W <- Workers]),
    ?assertEqual([], [R || R <- Replies, element(1, R) =/= ok]),
    ?assertEqual({ok, 200}, mdss:score(Pid, S, <<"hits">>)).

timeout_then_late_reply_is_dropped(Pid) ->
    {ok, OsPid} = mdss:os_pid(Pid),
    signal("STOP", OsPid),
    Reply = mdss:call(Pid, len, [<<"season-1">>], 200),
    signal("CONT", OsPid),
    ?assertMatch({error, {timeout, _}}, Reply),
    ?assertEqual({ok, 3}, mdss:call(Pid, len, [<<"season-1">>])),
    ?assertEqual({ok, OsPid}, mdss:os_pid(Pid)).

restarts_a_port_that_exits(Pid) ->
    {ok, OsPid} = mdss:os_pid(Pid),
    signal("STOP", OsPid),
    Self = self(),
    spawn_link(fun() -> Self ! {pending, mdss:rank(Pid, <<"season-1">>, <<"alice">>)} end),
    timer:sleep(100), % the call is sent and waits on the stopped port
    signal("KILL", OsPid),
    receive {pending, Pending} -> ?assertMatch({error, {port_exited, _}}, Pending)
    after 10000 -> error(no_reply_after_port_exit)
    end,
    ?assertEqual({ok, 1}, mdss:rank(Pid, <<"season-1">>, <<"alice">>)),
    {ok, NewOsPid} = mdss:os_pid(Pid),
    ?assertNotEqual(OsPid, NewOsPid).

signal(Name, OsPid) ->
    [] = os:cmd("kill -" ++ Name ++ " " ++ integer_to_list(OsPid)),
    ok.

%% The port's own protocol, without the client: bad frames get errors and the port carries on.
raw_port_test_() ->
    {"bad frames get errors and the port carries on", {timeout, 60, fun() ->
        Python = case os:getenv("MDSS_PYTHON", "") of "" -> os:find_executable("python3"); P -> P end,
        Port = open_port({spawn_executable, Python},
                         [{args, ["-m", "mdss.port", "--store", "memory://"]}, {packet, 4}, binary, exit_status]),
        Ask = fun(Bin) -> true = port_command(Port, Bin), receive {Port, {data, D}} -> binary_to_term(D) end end,
        ?assertMatch({error, undefined, {'InvalidArgumentError', _}}, Ask(<<"not a term">>)),
        ?assertMatch({error, undefined, {'InvalidArgumentError', _}}, Ask(<<131, 104, 2>>)),
        ?assertMatch({error, undefined, {'InvalidArgumentError', _}}, Ask(term_to_binary({hello, world}))),
        ?assertMatch({error, 7, {'InvalidArgumentError', _}}, Ask(term_to_binary({call, 7, len}))),
        ?assertMatch({error, 8, {'InvalidArgumentError', _}}, Ask(term_to_binary({call, 8, "len", [<<"s">>]}))),
        Ref = make_ref(),
        ?assertEqual({reply, Ref, 0}, Ask(term_to_binary({call, Ref, len, [<<"s">>]}))),
        ?assertEqual({reply, {any, "term"}, true}, Ask(term_to_binary({call, {any, "term"}, add, [<<"s">>, <<"m">>, 1]}))),
        port_close(Port)
    end}}.
